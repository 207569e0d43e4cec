"""The fault injectors, fired one at a time at seeded times beside the load: a worker SIGKILLed
and replaced, Redis, PostgreSQL and the API restarted, the run directory's disk filled, a
checkpoint truncated under its killed worker; each recorded with its time window."""

from __future__ import annotations

import asyncio
import errno
import os
import random
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import httpx

from benchmarks.soak.analysis import snapshot
from benchmarks.soak.lab import Proc, RunsDisk
from benchmarks.soak.load import Load, tiny_config
from benchmarks.soak.options import Options, log
from benchmarks.soak.record import Window, now


def plan_faults(opts: Options) -> tuple[list[tuple[float, str]], float | None]:
    """(seconds after the start, kind) of each fault, seeded, spread over the soak; and the flood's time."""
    rng = random.Random(opts.seed)
    d = opts.duration()
    kinds = [k for k, n in sorted(opts.fault_plan().items()) for _ in range(n)]
    rng.shuffle(kinds)
    plan = [(rng.uniform(0.05, 0.9) * d, k) for k in kinds]
    flood_at = rng.uniform(0.1, 0.8) * d if opts.flood_s > 0 and opts.flood_rps > 0 else None
    return plan, flood_at


def start_fill(disk: RunsDisk) -> tuple[int, Path, dict]:
    """Make the filesystem full: shrink the tmpfs to what it holds (``mount -o remount,size=``,
    instant, no memory) and write a filler file until ENOSPC. Returns (fd, filler, detail)."""
    detail: dict[str, Any] = {}
    for extra in (1, 16, 64):  # runs write meanwhile: a size below the usage is refused
        used = shutil.disk_usage(disk.path).used
        size_kb = used // 1024 + extra * 1024
        r = subprocess.run(["mount", "-o", f"remount,size={size_kb}k", str(disk.path)], capture_output=True, text=True)
        if r.returncode == 0:
            detail["shrunk_to_mb"] = round(size_kb / 1024, 1)
            break
    filler = disk.path / f".soak-filler-{uuid.uuid4().hex[:6]}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    detail["filler_mb"] = round(top_up(fd) / 2**20, 2)
    return fd, filler, detail


def top_up(fd: int) -> int:
    """Write to the filler until the filesystem is full again; bytes written."""
    written = 0
    for chunk in (b"\0" * (1 << 20), b"\0" * 4096):
        try:
            while True:
                written += os.write(fd, chunk)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
    return written


def end_fill(disk: RunsDisk, fd: int, filler: Path) -> None:
    """Free the disk: close and delete the filler, grow the tmpfs back to its size."""
    os.close(fd)
    filler.unlink(missing_ok=True)
    subprocess.run(["mount", "-o", f"remount,size={disk.size_mb}m", str(disk.path)], capture_output=True)


class Faults:
    """The injectors, beside the load whose record, tokens and flood they share; ``injector`` fires
    each planned fault (and the flood) at its time."""

    def __init__(self, load: Load):
        self.load = load
        self.opts, self.lab, self.tokens, self.rec, self.api = load.opts, load.lab, load.tokens, load.rec, load.api
        self.auth = load.auth

    def running_owned(self, runs: dict[int, Any] | None = None) -> list[tuple[Any, Proc]]:
        """(run, its worker) for each running run owned by one of our live workers."""
        out = []
        for r in (self.rec.runs if runs is None else runs).values():
            if r.status != "running" or not r.worker:
                continue
            parts = r.worker.rsplit(":", 2)
            if len(parts) == 3 and parts[1].isdigit() and (w := self.lab.worker_of_pid(int(parts[1]))) is not None:
                out.append((r, w))
        return out

    def wait_for(self, find: Callable[[dict[int, Any]], Any], timeout: float = 30.0) -> Any:
        """Poll the store every 0.1 s until ``find(runs)`` returns something (a fault's target)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.rec.stop:
            try:
                found = find(snapshot(self.lab.url))
            except Exception:  # noqa: BLE001 - the store may be restarting
                found = None
            if found:
                return found
            time.sleep(0.1)
        return None

    def target(self, find: Callable[[dict[int, Any]], Any], wait_s: float = 60.0) -> Any:
        """What ``find`` picks in the store; when nothing fits within 3 s (the lab is between runs),
        submit a run of the ``soak-target`` user over REST and wait for it (or anything) to fit."""
        found = self.wait_for(find, 3)
        if found:
            return found
        try:
            r = httpx.post(f"{self.api}/api/runs", headers=self.auth(self.tokens["target"]), timeout=30,
                           json={"config": tiny_config("grpo", self.opts.steps, self.opts.batch_prompts)})
            if r.status_code == 201:
                self.rec.accepted[r.json()["id"]] = {"user": "soak-target", "t": now()}
                self.rec.submissions[f"target run {r.status_code}"] += 1
        except httpx.HTTPError:
            pass
        return self.wait_for(find, wait_s)

    def fault_worker_kill(self, rng: random.Random) -> Window | None:
        busy = self.target(self.running_owned) or []
        run, w = rng.choice(busy) if busy else (None, rng.choice(self.lab.workers))
        t0 = now()
        self.lab.kill_worker(w)
        t_killed = now()
        self.lab.start_worker()
        return Window("worker_kill", t0, now(), {"worker": w.name, "run": run.id if run else None,
                                                  "kill_s": round(t_killed - t0, 2)})

    def fault_ckpt_truncate(self, rng: random.Random) -> Window | None:
        """SIGKILL the worker of a run that has a checkpoint and steps to go, truncate that
        checkpoint's state.pt to half its size, start a new worker (which resumes the run)."""
        from backend.db.models import Run
        from backend.db.session import session_scope

        def find(runs):
            return [(r, w) for r, w in self.running_owned(runs) if 1 <= r.current_step < self.opts.steps
                    and r.id not in self.rec.truncated and (self.lab.disk.path / str(r.id) / "checkpoints" / "latest").exists()]

        cands = self.target(find)
        if not cands:
            self.rec.skipped_faults.append({"kind": "ckpt_truncate", "why": "no running run with a checkpoint and steps to go"})
            return None
        run, w = rng.choice(cands)
        t0 = now()
        self.lab.kill_worker(w)
        ckdir = self.lab.disk.path / str(run.id) / "checkpoints"
        with session_scope(self.lab.url) as s:
            row = s.get(Run, run.id)
            status, owner = row.status, row.worker
        if status != "running" or owner != run.worker:  # it ended before the kill landed: a plain worker kill
            self.lab.start_worker()
            self.rec.skipped_faults.append({"kind": "ckpt_truncate", "why": f"run {run.id} was {status} by the kill"})
            return Window("worker_kill", t0, now(), {"worker": w.name, "run": run.id, "note": "ckpt_truncate target ended"})
        name = (ckdir / "latest").read_text().strip()
        state = ckdir / name / "state.pt"
        size = state.stat().st_size
        with open(state, "r+b") as f:
            f.truncate(size // 2)
        self.rec.truncated[run.id] = {"checkpoint": name, "size": size, "t": now()}
        t_cut = now()
        self.lab.start_worker()
        return Window("ckpt_truncate", t0, now(), {"worker": w.name, "run": run.id, "checkpoint": name,
                                                    "truncated_to": size // 2, "kill_to_truncate_s": round(t_cut - t0, 3)})

    def busy(self, runs: dict[int, Any]) -> list[int]:
        """Runs training (past their first step): what a restart should catch in the middle."""
        return [r.id for r in runs.values() if r.status == "running" and r.current_step >= 1]

    def fault_redis_restart(self, rng: random.Random) -> Window | None:
        assert self.lab.redis is not None
        running = self.target(self.busy) or []
        t0 = now()
        self.lab.redis.restart()
        return Window("redis_restart", t0, now(), {"persistence": self.opts.redis_persistence, "running": running})

    def fault_pg_restart(self, rng: random.Random) -> Window | None:
        assert self.lab.pg is not None
        running = self.target(self.busy) or []
        t0 = now()
        self.lab.pg.restart()
        return Window("pg_restart", t0, now(), {"running": running})

    def fault_api_kill(self, rng: random.Random) -> Window | None:
        def streaming(runs):  # wait (up to 30 s) for SSE clients following a running run
            return sum(1 for f in self.rec.follows if not f.ended and f.events and runs.get(f.run_id) is not None
                       and runs[f.run_id].status == "running")

        self.target(streaming)
        open_streams = sum(1 for f in self.rec.follows if not f.ended)
        t0 = now()
        self.lab.kill_api()
        self.lab.start_api()
        return Window("api_kill", t0, now(), {"sse_streams_open": open_streams})

    def fault_disk_full(self, rng: random.Random) -> Window | None:
        """Fill the run directory's filesystem, keep it full for ``--disk-full-s`` and until a run
        was caught training or starting in it (submitting one if none comes), then free it."""
        if not self.lab.disk.mounted:
            self.rec.skipped_faults.append({"kind": "disk_full", "why": self.lab.disk.why_not})
            return None
        disk = self.lab.disk
        self.target(self.busy)  # something to catch: a run past its first step, if one comes within 3 s
        t0 = now()
        self.rec.disk_full = True
        fd, filler, detail = start_fill(disk)
        caught: set[int] = set()
        submitted = False
        try:
            while True:
                top_up(fd)  # a run deleting its older checkpoint frees space: take it back
                try:
                    caught |= {r.id for r in snapshot(self.lab.url).values() if r.status == "running"}
                except Exception:  # noqa: BLE001
                    pass
                held = now() - t0
                if held >= self.opts.disk_full_s and caught or held > 60:
                    break
                if held >= self.opts.disk_full_s and not submitted:
                    self.target(lambda runs: [], wait_s=0)  # submits a target run (it starts on a full disk)
                    submitted = True
                time.sleep(0.1)
            detail["free_bytes_while_full"] = shutil.disk_usage(disk.path).free
        finally:
            end_fill(disk, fd, filler)
            self.rec.disk_full = False
        return Window("disk_full", t0, now(), {**detail, "running": sorted(caught)})

    async def injector(self, plan: list[tuple[float, str]], flood_at: float | None, flood_token: str,
                       flood_run: int | None) -> None:
        """Fire each planned fault at its time (seconds after the start), one at a time."""
        rng = random.Random(self.opts.seed + 7)
        events = sorted(plan + ([(flood_at, "flood")] if flood_at is not None else []))
        for at, kind in events:
            while not self.rec.stop and now() < self.rec.t0 + at:
                await asyncio.sleep(0.2)
            if self.rec.stop:
                return
            if kind == "flood":
                log(self.opts, f"flood: {self.opts.flood_rps:g} req/s for {self.opts.flood_s:g}s")
                await self.load.flood(flood_token, flood_run)
                continue
            log(self.opts, f"fault: {kind} (planned at {at:.0f}s)")
            w = None
            try:
                w = await asyncio.to_thread(getattr(self, f"fault_{kind}"), rng)
            except Exception as e:  # noqa: BLE001 - a fault that could not be made is reported, the soak goes on
                self.rec.skipped_faults.append({"kind": kind, "why": f"{type(e).__name__}: {e}"[:300]})
            if w is not None:
                self.rec.windows.append(w)
                log(self.opts, f"  {w.kind}: {w.end - w.start:.1f}s {w.detail}")
            await asyncio.sleep(2.0)
