"""verl -> platform metrics: token/FLOPs accounting from DataProto masks, the translation of
verl's metric names, per-benchmark eval results, and the logger object verl's ``Tracking``
calls (``log(data, step)``).

verl's own throughput metrics count trained tokens only; AERO generates more rollouts than it
trains, so generation is accounted separately here, with the platform's formulas
(trainer/core/flops.py, docs/metrics.md "FLOPs"): rollout FLOPs over every generated row
(prompt + response), training FLOPs over every trained real row with (3 + extra) forwards.
verl recomputes old log-probs before the update, so ``extra`` is 1, plus 1 with a reference
policy (KL). Masked pad rows are excluded; generation pad rows (the agent-loop divisor) are
reported as ``rollout/pad_rows`` and not in FLOPs.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

import common.metric_keys as mk
from trainer.core.strata import is_correct
from trainer.core.flops import step_accounting as flops_step_accounting
from trainer.verl.rows import ADV_COLUMN

# verl metric name -> platform key (docs/metrics.md). Anything else verl logs is kept under
# ``verl/<its name>`` (max/min, clip ratios, val-core...), except the keys already in the
# platform's namespace (PlatformTrainer writes those), which pass through.
VERL_TO_PLATFORM = {
    "actor/pg_loss": "loss/policy",
    "actor/entropy": mk.TRAIN_ENTROPY,
    "actor/grad_norm": mk.TRAIN_GRAD_NORM,
    "actor/pg_clipfrac": "train/clip_frac",
    "actor/ppo_kl": "train/approx_kl",
    "actor/kl_loss": mk.TRAIN_KL,
    "actor/lr": "optim/lr",
    "timing_s/step": mk.STEP_S,
    "timing_s/gen": mk.ROLLOUT_S,
    "timing_s/update_actor": "time/update_s",
    "timing_s/old_log_prob": "time/old_logprob_s",
    "timing_s/update_weights": "time/weight_sync_s",
    "timing_s/testing": "time/eval_s",
    "perf/throughput": "verl/throughput_tokens_per_gpu_s",
    "perf/mfu/actor": "verl/mfu_actor",
    "perf/max_memory_allocated_gb": "verl/max_memory_allocated_gb",
    "response_length/mean": "verl/response_length_trained_mean",
}
PLATFORM_PREFIXES = ("time/", "rollout/", "tokens/", "flops/", "reward/", "response/", "adv/", "prompts/", "strata/",
                     "zero_acc/", "all_correct/", "rescue/", "groups/", "savings/", "dapo/", "train/", "loss/",
                     "optim/", "verifier/")
VERL_PREFIX = "verl/"
COUNTERS = ("training/",)  # verl's step and epoch counters: the step is the x axis, not a metric
TRAIN_TIMERS = ("old_log_prob", "ref", "adv", "update_actor", "update_weights")


def translate(data: dict[str, Any]) -> dict[str, float]:
    """verl's step metrics -> platform keys. Platform keys pass through; ``time/train_s`` is the
    sum of verl's training-side timers (old log-probs, ref, advantages, update, weight sync)
    unless the trainer already set it. verl's other names are kept as ``verl/<name>``.
    Non-finite and non-numeric values are dropped."""
    out: dict[str, float] = {}
    for k, v in data.items():
        if k.startswith(COUNTERS):
            continue
        key = VERL_TO_PLATFORM.get(k, k if k.startswith(PLATFORM_PREFIXES + (VERL_PREFIX,)) else VERL_PREFIX + k)
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out[key] = f
    if mk.TRAIN_S not in out and any(f"timing_s/{t}" in data for t in TRAIN_TIMERS):
        out[mk.TRAIN_S] = float(sum(float(data.get(f"timing_s/{t}", 0.0)) for t in TRAIN_TIMERS))
    return out


def seq_lengths(batch) -> np.ndarray:
    """int[B] attended tokens (prompt + response) per row."""
    return batch.batch["attention_mask"].sum(-1).long().cpu().numpy()


def truncated_rows(batch, stop_ids: Sequence[int]) -> np.ndarray:
    """bool[B]: the row's response ends without a stop token (cut at ``max_new_tokens``), the
    embedded engine's ``not finished``. ``stop_ids``: every id that ends a response (the
    tokenizer's EOS and the generation config's, as the rollout server stops on)."""
    import torch

    lengths = batch.batch["response_mask"].sum(-1).long()
    last = batch.batch["responses"].gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0]
    stop = torch.isin(last, torch.as_tensor(list(stop_ids), dtype=last.dtype))
    return ((lengths > 0) & ~stop).cpu().numpy()


def step_accounting(generated, train, shape: tuple[int, int, int], *, extra_forwards: int,
                    stop_ids: Sequence[int]) -> dict[str, float]:
    """``trainer.core.flops.step_accounting`` (the one every engine calls) over verl's rows.

    Args:
        generated: every generated real row of the step (DataProto; None when the step made no
            engine call); train: the trained rows,
            masked pad rows excluded (None when nothing was trained).
        shape: (N parameters, layers, d_model) for the FLOPs formulas.
        stop_ids: the ids that end a response (:func:`truncated_rows`).
    """
    if generated is None:  # a step with no engine call (every drawn prompt skipped): nothing generated or trained
        return flops_step_accounting(shape, gen_lengths=[], gen_response=[], gen_rewards=[], gen_truncated=[],
                                     train_lengths=[], train_response=[], train_rewards=[], train_advantages=[],
                                     extra_forwards=extra_forwards)
    gen_resp = generated.batch["response_mask"].sum(-1).long().cpu().numpy()
    tr_len, tr_resp, tr_rewards, adv = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), [], None
    if train is not None and len(train):
        tr_len = seq_lengths(train)
        mask = train.batch["response_mask"].float()
        tr_resp = mask.sum(-1).long().cpu().numpy()
        tr_rewards = train.batch["rm_scores"].sum(-1).float().cpu().tolist()
        if ADV_COLUMN in train.batch.keys():  # the curated loop's, one per row
            adv = train.batch[ADV_COLUMN].float().cpu().tolist()
        elif "advantages" in train.batch.keys():  # verl's estimator (stock fit), per token
            adv = ((train.batch["advantages"].float() * mask).sum(-1) / mask.sum(-1).clamp(min=1)).cpu().tolist()
    return flops_step_accounting(
        shape, gen_lengths=seq_lengths(generated).tolist(), gen_response=gen_resp.tolist(),
        gen_rewards=generated.batch["rm_scores"].sum(-1).float().cpu().tolist(),
        gen_truncated=truncated_rows(generated, stop_ids).tolist(), train_lengths=tr_len.tolist(),
        train_response=tr_resp.tolist(), train_rewards=tr_rewards, train_advantages=adv, extra_forwards=extra_forwards)


def eval_results(data_sources, sample_uids, correct, k: int, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Per-benchmark (data_source) Avg@k / Pass@k with per-problem (n, c) from verl's validation
    samples, through trainer.tasks.evaluate.summarize; plus the pooled 'overall' row (as the embedded
    evaluation)."""
    from trainer.tasks.evaluate import summarize

    data_sources, sample_uids = np.asarray(data_sources, dtype=object), np.asarray(sample_uids, dtype=object)
    correct = is_correct(correct)
    results, pooled = {}, []
    for source in dict.fromkeys(data_sources.tolist()):
        sel = data_sources == source
        per_problem = [(int((sample_uids[sel] == u).sum()), int(correct[sel][sample_uids[sel] == u].sum()))
                       for u in dict.fromkeys(sample_uids[sel].tolist())]
        results[str(source)] = summarize(per_problem, min(k, min(n for n, _ in per_problem)), seed)
        pooled += per_problem
    if pooled:
        results["overall"] = summarize(pooled, min(k, min(n for n, _ in pooled)), seed)
        results["overall"]["avg_at_k_macro"] = float(np.mean([v["avg_at_k"] for b, v in results.items() if b != "overall"]))
    return results


class StopRequested(Exception):
    """Raised at a step boundary after the run was asked to stop (a checkpoint was saved)."""


class PlatformLogger:
    """The object verl's ``Tracking`` calls: ``log(data, step)`` writes the platform's keys to a
    MetricSink. ``extra()`` supplies metrics the trainer computed for the step (accounting,
    strata, savings); ``pending_eval()`` the per-benchmark results of a validation that just ran.
    ``should_stop()`` is polled after each logged training step; when it says stop,
    ``on_stop(step)`` runs (the trainer saves a checkpoint) and :class:`StopRequested` is raised.
    ``on_logged(step)`` runs once a training step is written (the trainer commits its checkpoint).
    ``pending_detail()``: the step's rollout sample and histograms (``sink.log_detail``);
    ``system``: a trainer.platform.system_metrics.SystemMonitor whose sample joins each step's metrics.
    """

    def __init__(self, sink, extra: Callable[[], dict] | None = None, pending_eval: Callable[[], dict | None] | None = None,
                 should_stop: Callable[[], bool] | None = None, on_stop: Callable[[int], None] | None = None,
                 pending_detail: Callable[[], dict | None] | None = None, system=None,
                 on_logged: Callable[[int], None] | None = None):
        self.sink, self.extra, self.pending_eval = sink, extra, pending_eval
        self.should_stop, self.on_stop, self.on_logged = should_stop, on_stop, on_logged
        self.pending_detail, self.system = pending_detail, system
        self.last_step = 0

    def log(self, data: dict[str, Any], step: int) -> None:
        has_eval = any(k.startswith(("val-core/", "val-aux/")) for k in data)
        results = self.pending_eval() if (has_eval and self.pending_eval) else None
        if results:
            self.sink.log_eval(int(step), results)
        metrics = translate(data)
        metrics.update(self.extra() if self.extra else {})
        training_step = any(k.startswith("training/") or k == "timing_s/step" for k in data)
        if training_step:
            if self.system is not None:
                metrics.update(self.system.sample())
            self.sink.log(int(step), metrics)
            detail = self.pending_detail() if self.pending_detail else None
            if detail is not None:
                self.sink.log_detail(int(step), detail)
            self.last_step = int(step)
            if self.on_logged is not None:
                self.on_logged(int(step))
            if self.should_stop is not None and self.should_stop():
                if self.on_stop is not None:
                    self.on_stop(int(step))
                raise StopRequested(f"stop requested after step {step}")

    def finish(self, exit_code: int = 0) -> None:  # Tracking.finish calls this on some backends
        pass


def stop_file_flag(path: str | Path) -> Callable[[], bool]:
    """should_stop for a Ray actor: true once the launcher created ``path``."""
    p = Path(path)
    return p.exists


CHECKPOINTS_FILE = "checkpoints.jsonl"  # one {"step", "path"} line per checkpoint the trainer saved


class JsonlRelay:
    """Forward the lines a JsonlSink appends (DIR/metrics.jsonl, DIR/evals.jsonl, DIR/details.jsonl) and the
    trainer's checkpoint lines (DIR/checkpoints.jsonl) to another MetricSink, from the launcher
    process: the trainer runs in a Ray actor, possibly on another node of a shared filesystem,
    and cannot hold the platform's DB sink.

    It starts at the beginning of the files: a resumed run re-forwards the steps it already
    had, which a MetricSink takes idempotently (the later line for a step wins), so no step
    logged before a crash of the launcher is lost. A checkpoint is announced
    (``before_checkpoint`` then ``on_checkpoint``) only once every step it covers has been
    forwarded: verl saves a step's checkpoint before it logs the step (the trainer writes the
    checkpoint's line only once the step is logged; this guards a line from an older trainer)."""

    def __init__(self, directory: str | Path, sink):
        self.paths = {"metrics": Path(directory) / "metrics.jsonl", "evals": Path(directory) / "evals.jsonl",
                      "checkpoints": Path(directory) / CHECKPOINTS_FILE, "details": Path(directory) / "details.jsonl"}
        self.offsets = {k: 0 for k in self.paths}
        self.inodes: dict[str, int] = {}
        self.sink = sink
        self.last_step = 0
        self.last_metrics: dict[str, float] = {}
        self.final_eval: dict | None = None
        self.pending: list[tuple[int, Path]] = []
        self.announced: list[int] = []

    def pump(self) -> int:
        """Forward complete new lines; returns how many were forwarded."""
        n = 0
        for kind, path in self.paths.items():
            if not path.exists():
                continue
            with path.open("rb") as f:
                st = os.fstat(f.fileno())
                if self.inodes.get(kind, st.st_ino) != st.st_ino or st.st_size < self.offsets[kind]:
                    self.offsets[kind] = 0  # replaced or truncated (a re-logged step): read it all again
                self.inodes[kind] = st.st_ino
                f.seek(self.offsets[kind])
                chunk = f.read()
            done = chunk.rfind(b"\n") + 1  # a line being written is left for the next pump
            for line in chunk[:done].decode().splitlines():
                if not line.strip():
                    continue
                row = json.loads(line)
                step = int(row.pop("step"))
                if kind == "metrics":
                    self.last_metrics = {k: v for k, v in row.items() if v is not None}
                    self.sink.log(step, self.last_metrics)
                    self.last_step = max(self.last_step, step)
                elif kind == "evals":
                    self.sink.log_eval(step, row["results"])
                    self.final_eval = row["results"]
                elif kind == "details":
                    self.sink.log_detail(step, row["detail"])
                else:
                    self.pending.append((step, Path(row["path"])))
                n += 1
            self.offsets[kind] += done
        self._announce()
        return n

    def _announce(self) -> None:
        ready = [(s, p) for s, p in self.pending if s <= self.last_step]
        self.pending = [(s, p) for s, p in self.pending if s > self.last_step]
        for step, path in ready:
            self.sink.before_checkpoint(step)
            self.sink.on_checkpoint(step, path)
            self.announced.append(step)


def latest_checkpoint_step(checkpoint_dir: str | Path) -> int:
    """The step of verl's newest checkpoint under ``checkpoint_dir`` (0 when there is none)."""
    marker = Path(checkpoint_dir) / "latest_checkpointed_iteration.txt"
    try:
        return int(marker.read_text().strip())
    except (OSError, ValueError):
        return 0


def write_checkpoint_marker(checkpoint_dir: str | Path, step: int) -> None:
    """Name ``step`` in verl's marker under ``checkpoint_dir``, the checkpoint a resume loads;
    step 0 removes the marker (a resume starts from scratch). Atomic: a reader sees the old step
    or the new one."""
    marker = Path(checkpoint_dir) / "latest_checkpointed_iteration.txt"
    if step <= 0:
        marker.unlink(missing_ok=True)
        return
    tmp = marker.with_name(marker.name + ".tmp")
    tmp.write_text(str(int(step)))
    os.replace(tmp, marker)
