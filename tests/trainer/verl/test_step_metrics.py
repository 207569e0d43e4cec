"""verl -> platform metrics: name translation, generated-vs-trained accounting from DataProto
masks, per-benchmark eval results, the logger verl's Tracking calls, the launcher's relay."""

import json

import pytest
import torch

from trainer.platform.sinks import JsonlSink, MemorySink

from trainer.core.flops import rollout_flops, train_flops
from trainer.verl.step_metrics import JsonlRelay, PlatformLogger, StopRequested, eval_results, translate


def test_translate_maps_verl_names_keeps_platform_keys_and_prefixes_the_rest():
    out = translate({"actor/pg_loss": 0.5, "actor/grad_norm": 2.0, "actor/pg_clipfrac": 0.1, "actor/lr": 5e-6,
                     "timing_s/step": 10.0, "timing_s/gen": 6.0, "timing_s/old_log_prob": 1.0,
                     "timing_s/update_actor": 2.5, "timing_s/update_weights": 0.5,
                     "critic/score/mean": 0.3, "rescue/rounds": 2.0, "tokens/generated": 99.0,
                     "val-core/AIME24/acc/mean@8": 0.1, "actor/entropy": float("nan"), "note": "text",
                     "actor/pg_clipfrac_lower": 0.02, "verl/already": 1.0, "training/global_step": 3})
    assert out == {"loss/policy": 0.5, "train/grad_norm": 2.0, "train/clip_frac": 0.1, "optim/lr": 5e-6,
                   "time/step_s": 10.0, "time/rollout_s": 6.0, "time/old_logprob_s": 1.0, "time/update_s": 2.5,
                   "time/weight_sync_s": 0.5, "time/train_s": 4.0, "rescue/rounds": 2.0, "tokens/generated": 99.0,
                   # verl's other metrics are kept under verl/ (its max/min, clip ratios, val-core), not dropped
                   "verl/critic/score/mean": 0.3, "verl/val-core/AIME24/acc/mean@8": 0.1,
                   "verl/actor/pg_clipfrac_lower": 0.02, "verl/already": 1.0}


EOS = 2


def _batch(prompt_lens, resp_lens, rewards, adv=None, T_p=4, T_r=5, no_eos=()):
    """Rows whose responses end in EOS, except those in ``no_eos`` (cut at max_new_tokens)."""
    from verl import DataProto

    B = len(prompt_lens)
    attn = torch.zeros((B, T_p + T_r), dtype=torch.long)
    resp = torch.zeros((B, T_r), dtype=torch.long)
    ids = torch.full((B, T_r), 7)
    rm = torch.zeros((B, T_r))
    for i, (p, r) in enumerate(zip(prompt_lens, resp_lens)):
        attn[i, T_p - p:T_p + r] = 1
        resp[i, :r] = 1
        ids[i, r - 1] = 7 if i in no_eos else EOS
        rm[i, r - 1] = rewards[i]
    d = {"attention_mask": attn, "response_mask": resp, "rm_scores": rm, "responses": ids}
    if adv is not None:
        d["advantages"] = torch.tensor(adv, dtype=torch.float32)[:, None] * resp
    return DataProto.from_single_dict(d)


def test_accounting_counts_generated_and_trained_separately():
    pytest.importorskip("verl")
    from trainer.verl.step_metrics import step_accounting

    # row 0 ends in EOS exactly at max_new_tokens (finished); row 1 has no EOS (truncated)
    gen = _batch([3, 3, 2, 2], [5, 5, 1, 4], [1, 0, 0, 1], no_eos=(1,))
    train = _batch([3, 2], [5, 4], [1, 1], adv=[0.5, 0.0])
    shape = (1000, 2, 16)
    m = step_accounting(gen, train, shape, extra_forwards=1, stop_ids=[EOS])
    assert (m["rollout/generated"], m["tokens/generated"], m["rollout/trained"]) == (4, 15, 2)
    assert (m["tokens/trained"], m["tokens/response_trained"]) == (8 + 6, 9)
    assert m["flops/rollout"] == rollout_flops(*shape, [8, 8, 3, 6])
    assert m["flops/train"] == train_flops(*shape, [8, 6], 1) == 4 * rollout_flops(*shape, [8, 6])
    assert m["flops/total"] == m["flops/rollout"] + m["flops/train"]
    assert (m["reward/mean"], m["reward/trained_mean"]) == (0.5, 1.0)
    assert m["response/truncated_frac"] == 0.25  # the row without EOS, not the one whose EOS is its 5th token
    assert (m["adv/abs_mean"], m["adv/zero_frac"]) == (0.25, 0.5)
    nothing = step_accounting(gen, None, shape, extra_forwards=1, stop_ids=[EOS])
    assert (nothing["rollout/trained"], nothing["flops/train"], nothing["adv/zero_frac"]) == (0, 0, 1.0)


def test_eval_results_per_benchmark_with_per_problem_counts():
    sources = ["AIME24"] * 4 + ["MATH-500"] * 4
    uids = ["a", "a", "b", "b", "c", "c", "d", "d"]
    acc = [1, 0, 0, 0, 1, 1, 0, 1]
    r = eval_results(sources, uids, acc, k=2)
    assert list(r) == ["AIME24", "MATH-500", "overall"]
    assert r["AIME24"]["per_problem"] == [[2, 1], [2, 0]] and r["AIME24"]["avg_at_k"] == 0.25
    assert r["MATH-500"]["per_problem"] == [[2, 2], [2, 1]] and r["MATH-500"]["pass_at_k"] == 1.0
    assert r["overall"]["avg_at_k"] == 0.5 and r["overall"]["avg_at_k_macro"] == 0.5


def test_logger_writes_steps_evals_and_stops_at_a_step_boundary():
    sink, saved = MemorySink(), []
    stop = {"now": False}
    evals = {"AIME24": {"avg_at_k": 0.5}}
    log = PlatformLogger(sink, extra=lambda: {"rollout/generated": 24.0}, pending_eval=lambda: evals,
                         should_stop=lambda: stop["now"], on_stop=saved.append)
    log.log({"val-core/AIME24/acc/mean@8": 0.5}, step=0)  # validation before training: eval only
    assert sink.evals == {0: evals} and sink.steps == {}
    log.log({"training/global_step": 1, "actor/pg_loss": 0.1}, step=1)
    assert sink.steps[1] == {"loss/policy": 0.1, "rollout/generated": 24.0}
    stop["now"] = True
    with pytest.raises(StopRequested):
        log.log({"training/global_step": 2, "actor/pg_loss": 0.2}, step=2)
    assert saved == [2] and 2 in sink.steps and log.last_step == 2  # logged, checkpointed, then stopped


def test_attach_logger_reaches_the_tracking_the_stock_loop_builds():
    pytest.importorskip("verl")
    import verl.utils.tracking as tracking

    from trainer.verl.trainer import attach_logger

    sink = MemorySink()
    original = tracking.Tracking
    with attach_logger(PlatformLogger(sink)):
        from verl.utils.tracking import Tracking  # imported at call time, as RayPPOTrainer.fit does

        t = Tracking(project_name="p", experiment_name="e", default_backend=["console"])
        t.log(data={"training/global_step": 3, "actor/grad_norm": 1.5}, step=3)
    assert tracking.Tracking is original
    assert sink.steps == {3: {"train/grad_norm": 1.5}}


def test_relay_forwards_complete_lines_idempotently(tmp_path):
    from trainer.platform.sinks import JsonlSink

    src, dst = JsonlSink(tmp_path), MemorySink()
    relay = JsonlRelay(tmp_path, dst)
    src.log(1, {"a": 1.0})
    src.log_eval(1, {"B": {"avg_at_k": 0.1}})
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 2, "a": 2.0}))  # a line still being written: not forwarded yet
    assert relay.pump() == 2 and dst.steps == {1: {"a": 1.0}} and dst.evals == {1: {"B": {"avg_at_k": 0.1}}}
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write("\n")
    src.log(1, {"a": 1.5})  # a resumed run re-logs step 1: the later line wins
    assert relay.pump() == 2 and dst.steps == {1: {"a": 1.5}, 2: {"a": 2.0}} and relay.last_step == 2
    again = MemorySink()
    JsonlRelay(tmp_path, again).pump()  # a new launcher (resume) re-forwards everything
    assert again.steps == dst.steps




class _CheckpointSink(MemorySink):
    def __init__(self):
        super().__init__()
        self.events = []

    def log(self, step, metrics):
        super().log(step, metrics)
        self.events.append(("log", step))

    def before_checkpoint(self, step):
        self.events.append(("before", step))

    def on_checkpoint(self, step, path):
        self.events.append(("checkpoint", step, path.name))


def test_relay_announces_a_checkpoint_after_the_steps_it_covers(tmp_path):
    """verl saves step N's checkpoint before it logs step N: the announcement waits for the step."""
    from trainer.verl.step_metrics import CHECKPOINTS_FILE

    src, dst = JsonlSink(tmp_path), _CheckpointSink()
    relay = JsonlRelay(tmp_path, dst)
    src.log(1, {"a": 1.0})
    (tmp_path / CHECKPOINTS_FILE).write_text(json.dumps({"step": 2, "path": str(tmp_path / "global_step_2")}) + "\n")
    relay.pump()
    assert dst.events == [("log", 1)] and relay.pending  # step 2 not forwarded yet: not announced
    src.log(2, {"a": 2.0})
    relay.pump()
    assert dst.events == [("log", 1), ("log", 2), ("before", 2), ("checkpoint", 2, "global_step_2")]
    assert relay.announced == [2] and not relay.pending
