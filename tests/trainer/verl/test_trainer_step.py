"""PlatformTrainer's driver side on CPU: one AERO step and a two-step fit through verl's own
RayPPOTrainer methods (_compute_old_log_prob, compute_advantage, _load_checkpoint,
padding conversions, Tracking). Only what needs GPUs stands in: the vLLM agent loop
(conftest's scripted rollout), the FSDP actor worker group (returns log-probs of the right
shape, records what the update received) and the checkpoint engine (records sleep/wake)."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from trainer.spec.config import for_method, parse_run_config  # noqa: E402
from trainer.platform.sinks import MemorySink  # noqa: E402
from trainer.platform.step_detail import SampleRules  # noqa: E402
from trainer.platform.system_metrics import SystemMonitor  # noqa: E402

CFG = {"preset": None, "model_path": "/m", "task": "math", "train_data": "/d.jsonl", "engine": "verl",
       "method": "aero", "batch_prompts": 4, "n_total": 6, "mini_batches": 2, "shuffle_mini_batches": False,
       "aero": {"n_explore": 4, "n_max": 10, "delta_n": 2, "negative_selection": "first", "rounds_per_call": 1}}
SCRIPT = {0: [[0, 0, 0, 0], [0, 0], [0, 0], [1, 0]], 1: [[1, 1, 1, 1]], 2: [[1, 0, 0, 0]], 3: [[0, 0, 0, 0], [0, 1]]}


class StandInActor:
    """The FSDP actor worker group's interface as the trainer calls it (dp = 2)."""

    def __init__(self):
        self._dispatch_info = {"actor": [0, 1]}
        self.updates = []

    def compute_log_prob(self, td):
        from verl.utils import tensordict_utils as tu

        ids = td["input_ids"]  # nested (no padding), as the real worker receives it
        values = torch.full((ids.values().shape[0],), -0.5)
        nested = torch.nested.nested_tensor_from_jagged(values, offsets=ids.offsets())
        return tu.get_tensordict({"log_probs": nested, "entropy": nested.clone()}, {"metrics": {"mfu": 0.0}})

    def update_actor(self, td):
        from verl.utils import tensordict_utils as tu

        self.updates.append({k: tu.get_non_tensor_data(td, k, None) for k in ("global_batch_size", "mini_batch_size")}
                            | {"advantages": td["advantages"].clone(), "loss_mask": td["loss_mask"].clone(),
                               "rows": td["advantages"].shape[0]})
        return tu.get_tensordict({"x": torch.zeros(1)}, {"metrics": {"pg_loss": [0.25], "grad_norm": [1.5], "mfu": 0.1}})


class Replicas:
    def __init__(self, rollout):
        self.rollout, self.events = rollout, []

    def sleep_replicas(self):
        self.events.append(("sleep", self.rollout.calls))

    def update_weights(self, step=None):
        self.events.append(("wake", step))


def make_trainer(vr, tmp_path, **overrides):
    from trainer.verl.overrides import compose, to_overrides
    from trainer.verl.trainer import PlatformTrainer

    cfg = parse_run_config(for_method({**CFG, **overrides}, overrides.get("method", CFG["method"])))
    config = compose(to_overrides(cfg, out_dir=tmp_path, train_file="t.parquet", val_files=[], n_gpus_per_node=2)
                     + ["trainer.save_freq=-1", "trainer.test_freq=-1", "trainer.val_before_train=false"])
    tr = PlatformTrainer.__new__(PlatformTrainer)  # no workers, no dataloader: those need GPUs / data files
    rollout = vr.ScriptedRollout(SCRIPT)
    sink = MemorySink()
    tr.config, tr.run_cfg, tr.model_shape = config, cfg, (1000, 2, 16)
    tr._extra, tr._eval, tr.stopped, tr.global_steps, tr._layout, tr._saved_step = {}, None, False, 1, None, -1
    tr._server_seen = None
    tr.curation_rng = np.random.default_rng(cfg.seed)
    tr.method_state = {}
    tr.use_reference_policy, tr.use_critic, tr.ref_in_actor = False, False, False
    tr.tokenizer = SimpleNamespace(pad_token_id=vr.PAD, eos_token_id=vr.EOS,
                                   decode=lambda ids, skip_special_tokens=True: " ".join(map(str, ids)))
    tr.sample_rules, tr._detail = SampleRules(prompts=1), None
    tr.async_rollout_manager = SimpleNamespace(generate_sequences=rollout, agent_loop_workers=[0, 1, 2])
    tr.actor_rollout_wg = StandInActor()
    tr.checkpoint_manager = Replicas(rollout)
    from trainer.verl.step_metrics import PlatformLogger

    tr.platform_logger = PlatformLogger(sink, extra=tr._pop_extra, pending_eval=tr._pop_eval, should_stop=lambda: False,
                                        pending_detail=tr._pop_detail, system=SystemMonitor())
    return tr, rollout, sink


def batches(vr):
    while True:
        yield vr.split(vr.prompt_batch(4))


def test_one_aero_step_trains_masked_padded_curated_rows(vr, tmp_path):
    tr, rollout, _ = make_trainer(vr, tmp_path)
    metrics = tr.train_step(batches(vr))
    # every generation call (explore + 3 rescue rounds) ran before the replicas slept; then weights synced
    assert tr.checkpoint_manager.events == [("sleep", 4), ("wake", 1)]
    (upd,) = tr.actor_rollout_wg.updates
    # 10 curated rows padded to a multiple of dp (2) x mini-batches (2): 12; 2 mini-batches of 6
    assert (upd["rows"], upd["mini_batch_size"], upd["global_batch_size"]) == (12, 6, 5.0)
    mask = upd["loss_mask"].float()
    row_adv = (upd["advantages"] * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    a, bayes = 0.5 / (math.sqrt(0.5) + 1e-6), 1 / math.sqrt(5)
    assert sorted(np.round(row_adv.tolist(), 4)) == sorted(np.round([-a, a, bayes, bayes, bayes, bayes, a, -a, -a, a,
                                                                    0, 0], 4))
    assert (mask.sum(-1) == 0).sum() == 2  # the two pad rows carry no loss
    e = tr._extra
    assert (e["rollout/generated"], e["rollout/trained"], e["train/pad_rows"], e["rollout/pad_rows"]) == (24, 10, 2, 6)
    assert (e["rescue/rescued"], e["rescue/rounds"], e["groups/bayes"], e["rollout/gen_calls"]) == (2, 3, 1, 4)
    assert e["savings/grpo_rollouts"] == 4 * 6 and "savings/s2_flops" in e
    assert e["flops/total"] == e["flops/rollout"] + e["flops/train"] and e["time/reward_s"] == 0.0
    assert metrics["actor/pg_loss"] == 0.25 and "timing_s/update_actor" in metrics and "timing_s/old_log_prob" in metrics
    # the step's stored sample: both rescued groups with every row (explore, rescue rounds, curated out), one more prompt
    rows = tr._detail["rollouts"]
    rescued = {r["group"] for r in rows if r["stage"].startswith("rescue") and r["correct"]}
    assert len(rescued) == 2 and len({r["group"] for r in rows} - rescued) == 1
    assert {"explore", "curated out"} <= {r["stage"] for r in rows} and all(r["response"] for r in rows)
    assert sum(tr._detail["histograms"]["length"]["counts"]) == 24  # every generated row


def test_fit_logs_platform_metrics_each_step(vr, tmp_path):
    tr, rollout, sink = make_trainer(vr, tmp_path)
    tr.total_training_steps = 2
    tr.train_dataloader = [vr.prompt_batch(4).batch.to_dict() | {k: v for k, v in vr.prompt_batch(4).non_tensor_batch.items()}]
    tr._load_checkpoint = lambda: 0  # the stock loader needs the dataloader's state; no checkpoint here anyway
    tr.fit()
    assert sorted(sink.steps) == [1, 2] and sorted(sink.details) == [1, 2]
    m = sink.steps[2]
    assert m["system/rss_mb"] > 10
    assert m["loss/policy"] == 0.25 and m["train/grad_norm"] == 1.5
    assert m["time/step_s"] >= m["time/rollout_s"] > 0
    assert sink.steps[1]["rollout/trained"] == 10  # the scripted step above
    # step 2: the script has run out, every prompt fails: explore 16 + one rescue round of 8 (the
    # whole budget), then S2 keeps 4 rollouts of each all-fail group
    assert (m["rollout/generated"], m["rollout/trained"], m["groups/bayes"]) == (24, 16, 4)
    assert tr.checkpoint_manager.events[0] == ("wake", 0)  # weights pushed to the replicas before step 1


def test_dapo_step_with_nothing_kept_still_wakes_the_replicas(vr, tmp_path):
    tr, rollout, _ = make_trainer(vr, tmp_path, method="dapo", n_total=2,
                                  dapo={"max_gen_rounds": 1, "overlong_buffer": 2})
    tr.async_rollout_manager.generate_sequences = vr.ScriptedRollout({})  # all fail: no group kept
    tr.checkpoint_manager.rollout = tr.async_rollout_manager.generate_sequences
    tr.train_step(batches(vr))
    assert tr.actor_rollout_wg.updates == []
    assert tr.checkpoint_manager.events == [("sleep", 1), ("wake", 1)]
    assert tr._extra["dapo/cap_hit"] == 1 and tr._extra["rollout/trained"] == 0


def test_grpo_accounting_and_per_benchmark_eval(vr, tmp_path):
    from verl import DataProto

    tr, rollout, _ = make_trainer(vr, tmp_path, method="grpo", n_total=2)
    b, g = vr.split(vr.prompt_batch(2))
    idx = np.repeat(np.arange(2), 2)
    out = b.select_idxs(idx).union(vr.ScriptedRollout({0: [[1, 0]], 1: [[1, 1]]})(g.select_idxs(idx)))
    m = tr._grpo_accounting(out)
    assert (m["rollout/generated"], m["rollout/trained"], m["strata/all_correct"], m["prompts/used"]) == (4, 4, 1, 2)
    assert isinstance(out, DataProto)
    val = tr._val_metrics_update(np.array(["AIME24"] * 4 + ["MATH-500"] * 2, dtype=object),
                                 ["a", "a", "b", "b", "c", "c"], {"acc": [1, 0, 0, 0, 1, 1], "reward": [1, 0, 0, 0, 1, 1]},
                                 [])
    assert any(k.startswith("val-core/AIME24/") for k in val)
    ev = tr._pop_eval()
    assert ev["AIME24"]["per_problem"] == [[2, 1], [2, 0]] and ev["MATH-500"]["per_problem"] == [[2, 2]]


def test_checkpoint_saves_and_restores_the_curation_rng(vr, tmp_path, monkeypatch):
    """The curation RNG (S3's random draws) goes into curation_state.json beside verl's checkpoint and
    comes back on load, so a resumed run draws what an uninterrupted one would; each save is
    listed for the launcher's relay, and named in verl's marker, once its step is logged (a run
    lost between the save and the log resumes from the step before). verl's own save/load (which
    need the workers) stand aside."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from trainer.verl.step_metrics import CHECKPOINTS_FILE

    tr, _, _ = make_trainer(vr, tmp_path)
    (tmp_path / "verl").mkdir()
    marker = tmp_path / "verl_checkpoints" / "latest_checkpointed_iteration.txt"
    # verl's own save ends by naming its step in the marker
    monkeypatch.setattr(RayPPOTrainer, "_save_checkpoint", lambda self: marker.write_text(str(self.global_steps)))
    monkeypatch.setattr(RayPPOTrainer, "_load_checkpoint", lambda self: None)
    tr.global_steps = 3
    (tmp_path / "verl_checkpoints" / "global_step_3").mkdir(parents=True)
    tr.curation_rng.random(5)
    tr.method_state.update({"aero_mem": {"clock": 3, "memory": {"records": {"item 4": [1.5, 2.5, 3, 2]}}}})
    tr._save_checkpoint()
    folder = tmp_path / "verl_checkpoints" / "global_step_3"
    assert sorted(p.name for p in folder.iterdir()) == ["curation_state.json"]
    assert not marker.exists() and not (tmp_path / "verl" / CHECKPOINTS_FILE).exists()  # step 3 not logged yet
    tr._commit_checkpoint(2)  # an earlier step's log commits nothing
    assert not marker.exists()
    tr._commit_checkpoint(3)  # the platform logger wrote step 3
    assert marker.read_text() == "3"
    expected, saved_state = tr.curation_rng.random(4), json.loads(json.dumps(tr.method_state))
    tr.curation_rng = np.random.default_rng(123)  # a fresh process
    state = tr.method_state
    tr.method_state.clear()
    tr._load_checkpoint()
    assert np.array_equal(tr.curation_rng.random(4), expected)
    assert tr.method_state == saved_state and tr.method_state is state  # in place: the collector holds it
    lines = (tmp_path / "verl" / CHECKPOINTS_FILE).read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [3]
    tr._checkpoint_on_stop(3)  # a stop right after the step's own checkpoint saves nothing more
    assert len((tmp_path / "verl" / CHECKPOINTS_FILE).read_text().splitlines()) == 1 and tr.stopped


def test_a_checkpoint_with_the_old_state_file_name_still_resumes(vr, tmp_path, monkeypatch):
    """Checkpoints written before the rename hold the curation RNG in aero_state.json: a resume
    reads it when curation_state.json is absent, and the new name wins when both are there."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    from trainer.embedded.checkpoint import numpy_rng_state

    tr, _, _ = make_trainer(vr, tmp_path)
    monkeypatch.setattr(RayPPOTrainer, "_load_checkpoint", lambda self: None)
    tr.global_steps = 2
    folder = tmp_path / "verl_checkpoints" / "global_step_2"
    folder.mkdir(parents=True)
    old = np.random.default_rng(7)
    old.random(3)
    (folder / "aero_state.json").write_text(json.dumps({"curation_rng": numpy_rng_state(old)}))
    expected = old.random(4)
    tr._load_checkpoint()
    assert np.array_equal(tr.curation_rng.random(4), expected)
    new = np.random.default_rng(8)
    (folder / "curation_state.json").write_text(json.dumps({"curation_rng": numpy_rng_state(new)}))
    tr._load_checkpoint()
    assert np.array_equal(tr.curation_rng.random(4), new.random(4))
