"""What is read back and checked: the store's runs, steps and checkpoints, the files on disk, and
what the load recorded, against every invariant; the report's figures (counts, fault windows,
latencies) come out of the same pass."""

from __future__ import annotations

import json
import math
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.soak.lab import Lab
from benchmarks.soak.options import Options
from benchmarks.soak.record import TERMINAL, Record, Window, now
from worker.settings import DEFAULT_NICE

DISK_FULL_WORDS = ("no space left", "enospc", "errno 28", "disk full")
SLACK_S = 5.0  # claim + broker poll + stream wake-up, on top of "one run's time"


def epoch(ts: datetime | None) -> float | None:
    """A naive-UTC store timestamp as seconds since the epoch."""
    return None if ts is None else ts.replace(tzinfo=UTC).timestamp()


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def snapshot(url: str) -> dict[int, Any]:
    """Every run's row as the store holds it now, by id (the harness reads the store as the operator)."""
    from sqlalchemy import select

    from backend.db.models import Run
    from backend.db.session import session_scope

    with session_scope(url) as s:
        rows = s.execute(select(Run.id, Run.owner, Run.status, Run.current_step, Run.total_steps, Run.attempts, Run.worker,
                                Run.created_at, Run.started_at, Run.finished_at)).all()
    return {r.id: r for r in rows}


def check_files(url: str, runs_dir: Path, run_id: int) -> dict:
    """The run's newest announced checkpoint against the files: it is what ``checkpoints/latest``
    names, and it loads, at its step; and the file's step and training time next to the run's last
    stored step."""
    import torch
    from sqlalchemy import select

    from backend.db.models import Checkpoint, StepMetric
    from backend.db.session import session_scope

    out: dict[str, Any] = {"announced": None}
    with session_scope(url) as s:
        row = s.execute(select(Checkpoint.step, Checkpoint.path).where(Checkpoint.run_id == run_id)
                        .order_by(Checkpoint.step.desc()).limit(1)).first()
        last = s.execute(select(StepMetric.step, StepMetric.metrics).where(StepMetric.run_id == run_id)
                         .order_by(StepMetric.step.desc()).limit(1)).first()
    ckdir = runs_dir / str(run_id) / "checkpoints"
    latest = (ckdir / "latest").read_text().strip() if (ckdir / "latest").exists() else None
    out["latest_file"] = latest
    if row is not None:
        out["announced"] = row.step
        path = Path(row.path) / "state.pt"
        out["is_latest"] = Path(row.path).name == latest
        try:
            state = torch.load(path, map_location="cpu", weights_only=False)
            out["loads"] = True
            out["file_step"] = int(state.get("step", -1))
            out["file_elapsed_s"] = state.get("elapsed_s")
        except Exception as e:  # noqa: BLE001 - any load failure is the finding
            out["loads"] = False
            out["load_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    if last is not None:
        out["last_step"] = last.step
        out["last_elapsed_s"] = (last.metrics or {}).get("time/elapsed_s")
    return out


@dataclass
class Invariant:
    name: str
    checked: int = 0
    broken: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.broken


def in_windows(t: float, windows: list[Window], grace: float, kinds: tuple[str, ...] | None = None) -> bool:
    return any(w.start - 0.5 <= t <= w.end + grace for w in windows if kinds is None or w.kind in kinds)


def analyse(opts: Options, lab: Lab, rec: Record) -> dict:
    from sqlalchemy import select

    from backend.db.metrics import read_step_metrics
    from backend.db.models import MetricChunk, Run, StepMetric
    from backend.db.session import session_scope

    url = lab.url
    faults = [w for w in rec.windows if w.kind != "flood"]
    with session_scope(url) as s:
        runs = {r.id: r for r in s.scalars(select(Run).order_by(Run.id))}
        steps: dict[int, list[tuple[int, float | None, Any]]] = defaultdict(list)
        for rid, step, logged, metrics in s.execute(select(StepMetric.run_id, StepMetric.step, StepMetric.logged_at,
                                                           StepMetric.metrics).order_by(StepMetric.run_id, StepMetric.step)):
            steps[rid].append((step, epoch(logged), (metrics or {}).get("reward/mean")))
        chunks: dict[int, list[int]] = defaultdict(list)
        for rid, _, arr in s.execute(select(MetricChunk.run_id, MetricChunk.chunk, MetricChunk.steps)
                                     .order_by(MetricChunk.run_id, MetricChunk.chunk)):
            chunks[rid].extend(json.loads(arr))
        columnar = {rid: read_step_metrics(s, rid, ["reward/mean"]) for rid in runs}
    for rid in runs:  # runs that ended after the monitor's last look
        if rid not in rec.files and runs[rid].status in TERMINAL:
            rec.files[rid] = check_files(url, lab.disk.path, rid)

    inv = {k: Invariant(k) for k in ("terminal", "no_gaps", "succeeded_steps_once", "columnar_matches_log",
                                     "row_at_last_step", "checkpoint_file_matches_store", "failures_explained",
                                     "announced_checkpoint_loads", "first_run_within_one_run", "sse_no_missed_step",
                                     "sse_no_duplicate_step", "flood_429_retry_after", "flood_413", "others_not_limited")}
    status_counts = Counter(r.status for r in runs.values())
    one_run = [(r.finished_at - r.started_at).total_seconds() for r in runs.values()
               if r.status == "succeeded" and r.attempts == 1 and r.started_at and r.finished_at]
    one_run_s = max(one_run) if one_run else None
    failure_causes: Counter = Counter()
    resumed = sum(1 for r in runs.values() if r.attempts > 1)
    for rid, r in runs.items():
        st = [x[0] for x in steps.get(rid, [])]
        inv["terminal"].checked += 1
        if r.status not in TERMINAL:
            inv["terminal"].broken.append(f"run {rid} {r.status} (step {r.current_step}/{r.total_steps}, attempts {r.attempts})")
        inv["no_gaps"].checked += 1
        if st != list(range(1, len(st) + 1)):
            inv["no_gaps"].broken.append(f"run {rid} ({r.status}) stored steps {st[:12]}{'...' if len(st) > 12 else ''}")
        if r.status == "succeeded":
            total = int(r.config.get("steps", r.total_steps))
            inv["succeeded_steps_once"].checked += 1
            if st != list(range(1, total + 1)):
                inv["succeeded_steps_once"].broken.append(f"run {rid}: steps {st} for {total}")
            inv["columnar_matches_log"].checked += 1
            col = columnar[rid]
            log_vals = [None if v is None else float(v) for _, _, v in steps.get(rid, [])]
            if chunks.get(rid, []) != st or col.steps != st or col.series.get("reward/mean") != log_vals:
                inv["columnar_matches_log"].broken.append(f"run {rid}: chunk steps {chunks.get(rid)} vs log {st}")
            inv["row_at_last_step"].checked += 1
            if (r.current_step, r.total_steps, r.progress) != (total, total, 1.0):
                inv["row_at_last_step"].broken.append(f"run {rid}: row at {r.current_step}/{r.total_steps}, progress {r.progress}")
            f = rec.files.get(rid, {})
            inv["checkpoint_file_matches_store"].checked += 1
            if not (f.get("loads") and f.get("file_step") == total == f.get("last_step")
                    and f.get("file_elapsed_s") == f.get("last_elapsed_s")):
                inv["checkpoint_file_matches_store"].broken.append(f"run {rid}: file {f}")
        if r.status == "failed":
            cause = classify_failure(r, rec, faults, opts.grace_s)
            failure_causes[cause] += 1
            inv["failures_explained"].checked += 1
            if cause.startswith("UNEXPLAINED"):
                inv["failures_explained"].broken.append(f"run {rid}: {cause}")
        f = rec.files.get(rid)
        if f is not None and f.get("announced") is not None:
            inv["announced_checkpoint_loads"].checked += 1
            harness_broke_it = rid in rec.truncated and f.get("latest_file") == rec.truncated[rid]["checkpoint"] \
                and r.status == "failed"
            if not (f.get("loads") and f.get("is_latest") and f.get("file_step") == f.get("announced")) and not harness_broke_it:
                inv["announced_checkpoint_loads"].broken.append(f"run {rid} ({r.status}): {f}")

    # fair share: each user's first accepted run
    waits = {}
    for user in sorted({a["user"] for a in rec.accepted.values()}):
        first = min(rid for rid, a in rec.accepted.items() if a["user"] == user)
        r = runs.get(first)
        if r is None or r.started_at is None:
            continue
        wait = (r.started_at - r.created_at).total_seconds()
        overlap = any(w.start <= epoch(r.started_at) and w.end >= epoch(r.created_at) for w in faults)
        waits[user] = {"run": first, "wait_s": round(wait, 1), "fault_overlap": overlap}
        inv["first_run_within_one_run"].checked += 1
        if one_run_s is not None and wait > one_run_s + SLACK_S and not overlap:
            inv["first_run_within_one_run"].broken.append(f"{user}: run {first} waited {wait:.1f}s > {one_run_s:.1f}s + {SLACK_S:g}s")
    inv["first_run_within_one_run"].note = f"one run's time = {one_run_s and round(one_run_s, 1)} s (+{SLACK_S:g} s)"

    # SSE
    logged = {(rid, s_): t for rid, lst in steps.items() for s_, t, _ in lst}
    sse_lat, sse_relogged, sse_catchup = [], 0, 0
    reconnects = reconnects_with_id = reconnects_in_api_kill = complete = 0
    for f in rec.follows:
        reconnects += f.reconnects
        reconnects_with_id += f.reconnects_with_id
        reconnects_in_api_kill += sum(1 for t in f.reconnect_times if in_windows(t, rec.windows, 3.0, ("api_kill",)))
        got = [e[0] for e in f.events]
        if f.ended:
            complete += 1
            stored = [x[0] for x in steps.get(f.run_id, [])]
            inv["sse_no_missed_step"].checked += 1
            missing = sorted(set(stored) - set(got))
            if missing:
                inv["sse_no_missed_step"].broken.append(f"client {f.client} run {f.run_id}: missed {missing} "
                                                        f"(got {got}, reconnects {f.reconnects})")
            inv["sse_no_duplicate_step"].checked += 1
            dup = sorted(k for k, n in Counter(got).items() if n > 1)
            if dup:
                inv["sse_no_duplicate_step"].broken.append(f"client {f.client} run {f.run_id}: twice {dup}")
        for step, arrived, t_conn in f.events:
            t_log = logged.get((f.run_id, step))
            if t_log is None:
                continue
            if t_conn >= t_log:
                sse_catchup += 1
                continue
            if arrived < t_log:
                sse_relogged += 1
                continue
            if in_windows(t_log, rec.windows, opts.grace_s) or in_windows(arrived, rec.windows, opts.grace_s):
                continue
            sse_lat.append(arrived - t_log)

    # reads
    flood = rec.flood
    fw = (flood.get("start", -1), flood.get("end", -1))
    outside = [d for t, d, st, _ in rec.reads if st == 200 and not in_windows(t, rec.windows, opts.grace_s)]
    app_outside = [ms / 1000.0 for t, ms in rec.read_app_ms if not in_windows(t, rec.windows, opts.grace_s)]
    during_flood = [(d, st) for t, d, st, _ in rec.reads if fw[0] <= t <= fw[1]]
    read_status = Counter(str(st) for _, _, st, _ in rec.reads)
    errors_outside = sum(1 for t, _, st, _ in rec.reads if st != 200 and not in_windows(t, rec.windows, opts.grace_s))
    if flood:
        by = flood["by_status"]
        inv["flood_429_retry_after"].checked = by.get("429", 0)
        if not by.get("429") or flood["429_without_retry_after"]:
            inv["flood_429_retry_after"].broken.append(f"429s {by.get('429', 0)}, without Retry-After {flood['429_without_retry_after']}")
        inv["flood_413"].checked = sum(v for k, v in flood["by_kind_status"].items() if k.startswith("oversized"))
        if not flood["by_kind_status"].get("oversized 413"):
            inv["flood_413"].broken.append(f"no 413 among oversized bodies: {flood['by_kind_status']}")
        inv["others_not_limited"].checked = len(during_flood)
        limited = sum(1 for _, st in during_flood if st == 429)
        if limited:
            inv["others_not_limited"].broken.append(f"{limited} of the other users' reads got 429 during the flood")
    ok_flood = [d for d, st in during_flood if st == 200]

    report = {
        "setup": {"store": opts.store if not opts.database_url else "postgres (external)", "workers": opts.workers,
                  "users": opts.users, "runs_target": opts.runs, "sse_clients": opts.sse, "pollers": opts.pollers,
                  "steps": opts.steps, "batch_prompts": opts.batch_prompts, "seed": opts.seed,
                  "worker_nice": DEFAULT_NICE if opts.worker_nice is None else opts.worker_nice,
                  "api_workers": opts.api_workers,
                  "duration_s": opts.duration(),
                  "redis_persistence": opts.redis_persistence if opts.store != "sqlite" else None,
                  "tmpfs_mb": opts.tmpfs_mb if lab.disk.mounted else None, "cpus": os.cpu_count(),
                  "loadavg_1m_start": rec.loadavg_start, "loadavg_1m_end": round(os.getloadavg()[0], 2), "wall_s": round(now() - rec.t0, 1)},
        "runs": {"in_store": len(runs), "accepted_201": len(rec.accepted), **{f"status {k}": v for k, v in sorted(status_counts.items())},
                 "resumed (attempts > 1)": resumed, "submissions": dict(rec.submissions),
                 "failure causes": dict(failure_causes), "steps stored": sum(len(v) for v in steps.values())},
        "faults": [{"kind": w.kind, "at_s": round(w.start - rec.t0, 1), "duration_s": round(w.end - w.start, 1), **w.detail}
                   for w in sorted(rec.windows, key=lambda w: w.start)],
        "fault_counts": dict(Counter(w.kind for w in rec.windows)),
        "skipped": list(rec.skipped_faults) + [{"kind": "note", "why": n} for n in lab.notes],
        "latency": {
            "metric_read_ms (uncached, outside windows)": _ms(outside), "metric_read_target_p99_ms": 100,
            "metric_read_app_ms (the API's own time, Server-Timing)": _ms(app_outside),
            "step_to_sse_ms (outside windows)": _ms(sse_lat), "step_to_sse_target_p99_ms": 300,
            "reads by status": dict(read_status), "read errors outside windows": errors_outside,
            "sse samples excluded: connected after the write": sse_catchup,
            "sse samples excluded: step re-logged after a resume": sse_relogged,
        },
        "sse": {"follows": len(rec.follows), "followed to end": complete, "reconnects": reconnects,
                "reconnects with Last-Event-ID": reconnects_with_id, "reconnects during API restarts": reconnects_in_api_kill,
                "connect statuses": {str(k): v for k, v in rec.sse_statuses.items()}},
        "flood": {k: v for k, v in flood.items() if k not in ("start", "end")} | {
            "other users' reads during flood": len(during_flood), "their latency ms": _ms(ok_flood)},
        "fair_share": waits,
        "invariants": [{"name": i.name, "checked": i.checked, "broken": len(i.broken), "ok": i.ok, "note": i.note,
                        "examples": i.broken[:5]} for i in inv.values()],
    }
    report["violations"] = [f"{i.name}: {b}" for i in inv.values() for b in i.broken]
    return report


def _ms(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(1e3 * pct(values, 50), 1), "p99": round(1e3 * pct(values, 99), 1),
            "max": round(1e3 * max(values), 1)}


def classify_failure(run: Any, rec: Record, faults: list[Window], grace: float) -> str:
    """Why a run failed, if the harness caused it; ``UNEXPLAINED ...`` otherwise."""
    err = run.error or ""
    head = err.splitlines()[0] if err else ""
    low = head.lower()
    started, finished = epoch(run.started_at), epoch(run.finished_at) or now()
    created = epoch(run.created_at)

    def hit(kinds: tuple[str, ...]) -> bool:
        lo = started if started is not None else created
        return any(w.kind in kinds and w.start - grace <= finished and w.end + grace >= lo for w in faults)

    if head.startswith("could not enqueue"):
        return "submit refused (broker down)" if hit(("redis_restart", "pg_restart", "api_kill")) else f"UNEXPLAINED {head[:160]}"
    if any(w in low for w in DISK_FULL_WORDS):
        return "disk full" if hit(("disk_full",)) else f"UNEXPLAINED disk full outside a disk_full window: {head[:160]}"
    if run.id in rec.truncated:
        return "truncated checkpoint" if "checkpoint" in low else f"UNEXPLAINED (truncated checkpoint, cause does not name it): {head[:160]}"
    if hit(("disk_full",)):
        return f"UNEXPLAINED (in a disk_full window, cause does not name the full disk): {head[:160]}"
    return f"UNEXPLAINED {head[:200]}"
