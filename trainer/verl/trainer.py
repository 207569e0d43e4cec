"""PlatformTrainer: verl's RayPPOTrainer that trains every registered method (trainer/methods/)
with platform metrics.

Shaped like verl's DAPO recipe trainer (a RayPPOTrainer subclass whose ``fit`` owns the
generation phase). Every method whose spec does not say ``verl.stock_fit`` runs the curated
loop, :meth:`PlatformTrainer.fit_curated`; one step of it, the same for each such method:

    batch      <- next prompt batch (verl dataloader, P = data.train_batch_size)
    collected  <- the method's registered step through trainer/verl/collect.py: each engine call
                  it asks for (AERO's exploration and rescue rounds, DAPO's further prompt
                  batches, ...) is one generate call of per-prompt repeated rows padded to the
                  agent-loop worker divisor; the step returns the rows to train and their
                  advantages
    sleep the rollout replicas (only now: every engine call of the step ran before)
    lay the training rows out as the embedded update's mini-batches, padded with masked rows
                  to a multiple of the data-parallel size (trainer/verl/rows.py)
    old log-probs, reference log-probs, the step's own advantages (the batch's
                  ``ADV_COLUMN``, the method step's values, not a verl estimator's), actor
                  update, weight sync
    log platform metrics (PlatformLogger) + checkpoint (with the curation RNG and the method's
                  state) + validation

A method whose spec says ``verl.stock_fit`` (GRPO, Dr.GRPO: exactly verl's GRPO) runs the stock
``RayPPOTrainer.fit`` unchanged; this class only adds, through ``_update_actor``, the platform
accounting of the batch it trains, and attaches the platform logger to the ``Tracking`` object
the stock loop builds.

Departures from the stock loop, all for variable-size batches: sequence-length balancing
across ranks (``trainer.balance_batch``) is not applied to the curated batches (their layout
is the embedded update's mini-batches, trainer/verl/rows.py); the seq-mean loss normaliser
(``global_batch_size``) is real rows / mini-batches, the embedded update's ``n_seqs``, not the
padded count. The curation RNG (a method step's random draws, such as AERO's S3) is seeded like the embedded engine's and,
with the method's own state across steps (aero-mem's prompt memory, Knapsack's and GRESO's
histories), saved with verl's checkpoints (``curation_state.json``; a checkpoint written before the
rename has ``aero_state.json``, read when the new file is absent), so a resumed run draws what
an uninterrupted one would.
"""

from __future__ import annotations

import contextlib
import json
import time
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.core_algos import agg_loss
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_response_mask
from verl.utils import tensordict_utils as tu
from verl.utils.debug import marked_timer
from verl.utils.metric import reduce_metrics
from verl.utils.py_functional import rename_dict
from verl.workers.utils.padding import left_right_2_no_padding

import common.metric_keys as mk
from trainer.spec.config import RunConfig
from trainer.platform.local_checkpoint import prune_verl_steps
from trainer.embedded.checkpoint import numpy_rng_from_state, numpy_rng_state
from trainer.methods.spec import get_method
from trainer.methods.step import strata_stats
from trainer.verl.collect import VerlCollected, collect
from trainer.verl.model_dir import stop_ids
from trainer.platform.step_detail import SampleRules
from trainer.platform.system_metrics import SystemMonitor
from trainer.verl.rows import ADV_COLUMN, pad_for_update, real_rows, row_correct, unpad_masked
from trainer.verl.step_detail import best_effort, curated_detail, stock_detail
from trainer.verl.step_metrics import (CHECKPOINTS_FILE, PlatformLogger, eval_results, latest_checkpoint_step,
                                       step_accounting, write_checkpoint_marker)

STATE_FILE = "curation_state.json"  # the curation RNG and the method's state, beside each verl checkpoint
LEGACY_STATE_FILE = "aero_state.json"  # its name in checkpoints written before; still read on resume


def state_file(folder: Path) -> Path:
    """The curation-state file of the checkpoint in ``folder``: :data:`STATE_FILE`, or
    :data:`LEGACY_STATE_FILE` when only that one is there (an older checkpoint)."""
    state = folder / STATE_FILE
    legacy = folder / LEGACY_STATE_FILE
    return legacy if not state.is_file() and legacy.is_file() else state


@contextlib.contextmanager
def attach_logger(logger: PlatformLogger):
    """Make every ``verl.utils.tracking.Tracking`` built inside the block also call ``logger``.

    The stock ``fit`` builds its Tracking from the module attribute at call time, so swapping the
    attribute for a subclass that adds one backend reaches it; restored on exit."""
    import verl.utils.tracking as tracking

    base = tracking.Tracking

    class WithPlatform(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kw: Any):
            super().__init__(*args, **kw)
            self.logger["aero_lab"] = logger

    tracking.Tracking = WithPlatform
    try:
        yield WithPlatform
    finally:
        tracking.Tracking = base


class PlatformTrainer(RayPPOTrainer):
    """RayPPOTrainer + every method's own step (the curated loop, or verl's stock fit for a
    ``verl.stock_fit`` method) + platform metrics (module docstring).

    Extra keyword arguments: ``run_cfg`` (the platform RunConfig), ``sink`` (a MetricSink the
    PlatformLogger writes to), ``should_stop`` (polled after each step), ``model_shape``
    (N parameters, layers, d_model) for FLOPs, ``system`` (the SystemMonitor sampled each step:
    the runner's reads the GPUs of every node the run holds; by default the GPUs this actor sees)."""

    def __init__(self, *args: Any, run_cfg: RunConfig, sink, should_stop: Callable[[], bool],
                 model_shape: tuple[int, int, int], system: SystemMonitor | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.run_cfg, self.model_shape = run_cfg, model_shape
        self._extra: dict[str, float] = {}
        self._eval: dict | None = None
        self._layout = None  # the curated batch's mini-batch layout, for _update_actor
        self._saved_step = -1
        self._pending_checkpoint: tuple[int, Path] | None = None  # (step, folder) saved, its step not yet logged
        self._server_seen: dict[str, float] | None = None
        self.curation_rng = np.random.default_rng(run_cfg.seed)  # as the embedded loop's; checkpointed
        self.method_state: dict = {}  # a method's plain data across steps (aero-mem's memory); checkpointed
        self.stopped = False
        self.sample_rules = SampleRules.from_env()  # the operator's rule for the stored rollout sample
        self._detail: dict | None = None
        self.platform_logger = PlatformLogger(sink, extra=self._pop_extra, pending_eval=self._pop_eval,
                                              should_stop=should_stop, on_stop=self._checkpoint_on_stop,
                                              on_logged=self._commit_checkpoint,
                                              pending_detail=self._pop_detail, system=system or SystemMonitor())

    @cached_property
    def _stop_ids(self) -> list[int]:
        """The ids that end a response, for the truncated share (trainer/verl/model_dir.py)."""
        return stop_ids(self.config.actor_rollout_ref.model.path, self.tokenizer)

    @property
    def _stock(self) -> bool:
        """The method runs verl's own fit (GRPO, Dr.GRPO: every rollout trained)."""
        return get_method(self.run_cfg.method).verl.stock_fit

    # ------------------------------------------------------------------ hooks into the stock loop

    def _pop_extra(self) -> dict[str, float]:
        extra, self._extra = self._extra, {}
        return extra

    def _pop_detail(self) -> dict | None:
        detail, self._detail = self._detail, None
        return detail

    def _pop_eval(self) -> dict | None:
        results, self._eval = self._eval, None
        return results

    def _checkpoint_on_stop(self, step: int) -> None:
        self.stopped = True
        if self._saved_step != self.global_steps:  # the step's own save_freq checkpoint may have run
            self._save_checkpoint()

    def _step_folder(self) -> Path:
        return Path(self.config.trainer.default_local_dir) / f"global_step_{self.global_steps}"

    def _save_checkpoint(self):
        """verl's checkpoint, plus the curation RNG and the method's state (:data:`STATE_FILE`
        beside it), left uncommitted until its step is logged (:meth:`_commit_checkpoint`).

        verl's loops save a step's checkpoint before they validate and log it. A run that dies in
        between (a node lost during the step's validation) would resume after a step whose metrics
        no one stored. So verl's marker, which a resume reads, is put back to the last committed
        step here, and moves to this one once the platform logger has written the step."""
        root = Path(self.config.trainer.default_local_dir)
        committed = latest_checkpoint_step(root)
        out = super()._save_checkpoint()
        self._saved_step = self.global_steps
        folder = self._step_folder()
        (folder / STATE_FILE).write_text(json.dumps({"curation_rng": numpy_rng_state(self.curation_rng),
                                                     "method_state": self.method_state}))
        self._pending_checkpoint = (int(self.global_steps), folder)
        if self.platform_logger.last_step >= self.global_steps:  # saved after its step was logged (a stop)
            self._commit_checkpoint(int(self.global_steps))
        else:
            write_checkpoint_marker(root, committed)
        return out

    def _commit_checkpoint(self, step: int) -> None:
        """Once ``step`` is logged: name its pending checkpoint in verl's marker, announce it in
        OUT/verl/checkpoints.jsonl (the launcher relays it to the platform's sink) and delete all
        but the newest ``keep_checkpoints`` step folders."""
        if self._pending_checkpoint is None or self._pending_checkpoint[0] > step:
            return
        saved, folder = self._pending_checkpoint
        self._pending_checkpoint = None
        write_checkpoint_marker(folder.parent, saved)
        with (Path(self.config.aero_lab.out_dir) / "verl" / CHECKPOINTS_FILE).open("a") as f:
            f.write(json.dumps({"step": saved, "path": str(folder)}) + "\n")
        prune_verl_steps(folder.parent, self.run_cfg.keep_checkpoints)

    def _load_checkpoint(self):
        """verl's resume, plus the curation RNG and the method's state saved beside the checkpoint
        (:func:`state_file`)."""
        out = super()._load_checkpoint()
        state = state_file(self._step_folder())
        if self.global_steps > 0 and state.is_file():
            saved = json.loads(state.read_text())
            self.curation_rng = numpy_rng_from_state(saved["curation_rng"])
            self.method_state.clear()
            self.method_state.update(saved.get("method_state") or {})
        return out

    def _extra_forwards(self) -> int:
        """Forwards besides the update's own: the old-log-prob recompute, plus the reference."""
        return 1 + int(self.use_reference_policy)

    def _val_metrics_update(self, data_sources, sample_uids, reward_extra_infos_dict, sample_turns):
        out = super()._val_metrics_update(data_sources, sample_uids, reward_extra_infos_dict, sample_turns)
        acc = reward_extra_infos_dict.get("acc") or reward_extra_infos_dict.get("reward")
        if acc:
            self._eval = eval_results(data_sources, sample_uids, acc, k=self.run_cfg.eval_n, seed=self.run_cfg.seed)
        return out

    def _update_actor(self, batch: DataProto) -> DataProto:
        """The stock update, with a curated batch's mini-batches and seq-mean normaliser from its
        layout (``self._layout``, set by :meth:`_update`).

        Stock GRPO batches get exactly the stock values; the step's platform accounting of a
        stock batch is recorded here (everything generated is trained)."""
        if self._stock:
            self._extra.update(self._grpo_accounting(batch))
            self._detail = best_effort(stock_detail, batch, self.run_cfg, self.tokenizer, self.sample_rules, self.global_steps)
        cfg = self.config.actor_rollout_ref
        batch.meta_info["multi_turn"] = cfg.rollout.multi_turn.enable
        batch.meta_info["temperature"] = cfg.rollout.temperature
        layout, self._layout = self._layout, None
        if layout is None:  # the stock loop's batch: every row real, P / mini_batches prompts per mini-batch
            mini = cfg.actor.ppo_mini_batch_size * cfg.rollout.n
            global_batch = float(mini)
        else:
            mini, global_batch = layout.mini_batch_size, layout.rows_per_mini_batch
        batch_td = left_right_2_no_padding(batch.to_tensordict())
        tu.assign_non_tensor(
            batch_td, calculate_entropy=cfg.actor.calculate_entropy or cfg.actor.entropy_coeff != 0.0,
            distillation_use_topk=False, distillation_only=False, global_batch_size=global_batch,
            mini_batch_size=mini, epochs=cfg.actor.ppo_epochs, seed=cfg.actor.data_loader_seed,
            dataloader_kwargs={"shuffle": cfg.actor.shuffle}, compute_loss=True)
        out = rename_dict(tu.get(self.actor_rollout_wg.update_actor(batch_td), "metrics"), "actor/")
        out["perf/mfu/actor"] = out.pop("actor/mfu", 0.0)
        return DataProto.from_single_dict(data={}, meta_info={"metrics": out})

    def _grpo_accounting(self, batch: DataProto) -> dict[str, float]:
        cfg = self.run_cfg
        m = step_accounting(batch, batch, self.model_shape, extra_forwards=self._extra_forwards(),
                            stop_ids=self._stop_ids)
        ok = row_correct(batch)
        uids = batch.non_tensor_batch["uid"]
        correct = np.array([ok[uids == u].sum() for u in dict.fromkeys(uids.tolist())], dtype=np.int64)
        m.update(strata_stats(correct, cfg.n_total))
        m[mk.ZERO_ACC_AFTER_RESCUE] = m[mk.ZERO_ACC_AFTER_EXPLORE]
        m[mk.PROMPTS_USED] = float(len(correct))
        m[mk.GEN_CALLS] = 1.0  # the stock loop generates the batch in one call
        m.update(self._rollout_server_stats())
        return m

    def _rollout_server_stats(self) -> dict[str, float]:
        """Since the previous call: the HF rollout servers' batched sampler calls
        (``rollout/engine_calls``) and sampling seconds (``time/engine_generate_s``); what
        ``time/rollout_s`` holds beyond them is the agent loop's, the reward loop's and Ray's.
        Validation requests between steps count too. Only for rollout ``aero_hf``."""
        from trainer.verl.plugins import ROLLOUT_NAME

        manager = getattr(self, "llm_server_manager", None)
        if manager is None or self.config.actor_rollout_ref.rollout.name != ROLLOUT_NAME:
            return {}
        import ray

        stats = ray.get([s.stats.remote() for r in manager.get_replicas() for s in r.servers])
        now = {k: float(sum(st[k] for st in stats)) for k in ("calls", "generate_s")}
        before, self._server_seen = self._server_seen or {k: 0.0 for k in now}, now
        return {"rollout/engine_calls": now["calls"] - before["calls"],
                "time/engine_generate_s": now["generate_s"] - before["generate_s"]}

    # ------------------------------------------------------------------ fit

    def fit(self):
        with attach_logger(self.platform_logger):
            if self._stock:
                return super().fit()
            return self.fit_curated()

    def _batches(self):
        """Prompt batches from the dataloader, epoch after epoch, as (batch, gen_batch)."""
        while True:
            for batch_dict in self.train_dataloader:
                batch = DataProto.from_single_dict(batch_dict)
                batch.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
                batch.non_tensor_batch["uid"] = np.array([f"s{self.global_steps}-{i}-{time.time_ns()}"
                                                          for i in range(len(batch))], dtype=object)
                gen_batch = self._get_gen_batch(batch)
                gen_batch.meta_info["global_steps"] = self.global_steps
                yield batch, gen_batch

    def _generate(self, timing: dict[str, float]) -> Callable[[DataProto], DataProto]:
        def generate(request: DataProto) -> DataProto:
            out = self.async_rollout_manager.generate_sequences(request)
            for k, v in out.meta_info.pop("timing", {}).items():
                timing[k] = timing.get(k, 0.0) + float(v)
            return out
        return generate

    def _divisor(self) -> int:
        return len(self.async_rollout_manager.agent_loop_workers)

    def fit_curated(self):
        """The curated loop of every method that is not ``verl.stock_fit`` (module docstring);
        checkpoints, validation and resume as stock."""
        from verl.utils.tracking import Tracking  # the patched class (attach_logger)

        c = self.config
        logger = Tracking(project_name=c.trainer.project_name, experiment_name=c.trainer.experiment_name,
                          default_backend=c.trainer.logger, config=None)
        self.global_steps = 0
        self._load_checkpoint()
        self.checkpoint_manager.update_weights(self.global_steps)
        if c.trainer.get("val_before_train", True) and self.global_steps == 0:
            logger.log(data=self._timed_validate(), step=0)
        self.global_steps += 1
        batches = self._batches()
        while self.global_steps <= self.total_training_steps:
            is_last = self.global_steps >= self.total_training_steps
            metrics = self.train_step(batches)
            if c.trainer.save_freq > 0 and (is_last or self.global_steps % c.trainer.save_freq == 0):
                self._save_checkpoint()
            if c.trainer.test_freq > 0 and (is_last or self.global_steps % c.trainer.test_freq == 0):
                metrics.update(self._timed_validate())
            metrics["training/global_step"] = self.global_steps
            logger.log(data=metrics, step=self.global_steps)
            self.global_steps += 1

    def _timed_validate(self) -> dict[str, Any]:
        """verl's validation, timed as the stock loop times it (``timing_s/testing`` -> time/eval_s)."""
        timing: dict[str, float] = {}
        with marked_timer("testing", timing):
            out = self._validate()
        return {**out, "timing_s/testing": timing["testing"]}

    def train_step(self, batches) -> dict[str, Any]:
        """One step of the run's method (its registered step, then the update of the rows it
        returns); returns verl-style metrics, platform ones go to ``self._extra``."""
        cfg, metrics, timing = self.run_cfg, {}, {}
        t0 = time.perf_counter()
        generate = self._generate(timing)
        with marked_timer("gen", timing):
            col = collect(cfg, lambda: next(batches), generate, self._divisor(), self.curation_rng, self.method_state)
            self.checkpoint_manager.sleep_replicas()  # every round has run: the replicas may sleep now
        self._detail = (best_effort(curated_detail, col, cfg, self.tokenizer, self.sample_rules, self.global_steps)
                        if col.generated is not None else None)  # None: no engine call, nothing to show
        t1 = time.perf_counter()
        train = None
        if col.train is not None and len(col.train):
            train, metrics = self._update(col, timing)
        else:
            self.checkpoint_manager.update_weights(self.global_steps)  # wake the replicas for the next step
        t2 = time.perf_counter()
        extra = step_accounting(col.generated, unpad_masked(train) if train is not None else None, self.model_shape,
                                extra_forwards=self._extra_forwards(), stop_ids=self._stop_ids)
        extra.update(col.stats)
        extra.update({mk.STEP_S: t2 - t0, mk.ROLLOUT_S: t1 - t0, mk.TRAIN_S: t2 - t1,
                      mk.REWARD_S: 0.0,  # the reward loop scores inside generation (streamed)
                      mk.GEN_CALLS: float(col.gen.calls), "rollout/pad_rows": float(col.gen.pad_rows),
                      mk.PROMPTS_USED: float(col.prompts_used), **self._rollout_server_stats()})
        if train is not None:
            extra["train/pad_rows"] = float((~real_rows(train)).sum())
        if col.cost_metrics is not None and extra[mk.TOKENS_TRAINED] > 0:
            extra.update(col.cost_metrics(extra[mk.FLOPS_TRAIN] / extra[mk.TOKENS_TRAINED],
                                          (t2 - t1) / extra[mk.TOKENS_TRAINED]))
        self._extra.update(extra)
        metrics.update({f"timing_s/{k}": v for k, v in timing.items()})
        return metrics

    def _update(self, col: VerlCollected, timing: dict[str, float]) -> tuple[DataProto, dict[str, Any]]:
        """Layout with masked padding, old/ref log-probs, the step's advantages (``ADV_COLUMN``)
        as verl's advantages and returns, actor update, weight sync."""
        c, metrics = self.config, {}
        dp = self._get_dp_size(self.actor_rollout_wg, "actor")
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        batch, self._layout = pad_for_update(col.train, self.run_cfg.mini_batches, dp, pad_id)
        if "response_mask" not in batch.batch.keys():
            batch.batch["response_mask"] = compute_response_mask(batch)
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
        with marked_timer("old_log_prob", timing):
            old, _mfu = self._compute_old_log_prob(batch)
            metrics["actor/entropy"] = agg_loss(loss_mat=old.batch["entropys"], loss_mask=batch.batch["response_mask"],
                                                loss_agg_mode=c.actor_rollout_ref.actor.loss_agg_mode).item()
            old.batch.pop("entropys")
            batch = batch.union(old)
        if self.use_reference_policy:
            with marked_timer("ref", timing):
                batch = batch.union(self._compute_ref_log_prob(batch))
        with marked_timer("adv", timing):
            batch.batch["token_level_scores"] = batch.batch["rm_scores"]
            batch.batch["token_level_rewards"] = batch.batch["rm_scores"]
            adv = batch.batch[ADV_COLUMN].unsqueeze(-1) * batch.batch["response_mask"].to(torch.float32)
            batch.batch["advantages"], batch.batch["returns"] = adv, adv.clone()
        with marked_timer("update_actor", timing):
            metrics.update(reduce_metrics(self._update_actor(batch).meta_info["metrics"]))
        with marked_timer("update_weights", timing):
            self.checkpoint_manager.update_weights(self.global_steps)
        return batch, metrics

