"""One soak from start to end: the lab up, the load and the faults driven until every run ended,
the checks, and everything it made cleaned up (also on errors, SIGTERM and Ctrl-C)."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.soak.analysis import analyse, snapshot
from benchmarks.soak.faults import Faults, plan_faults
from benchmarks.soak.lab import Lab
from benchmarks.soak.load import Load, make_tokens, tiny_config
from benchmarks.soak.options import Options, log
from benchmarks.soak.record import TERMINAL, Record, now


async def drive(opts: Options, lab: Lab, rec: Record) -> None:
    """The soak itself: the tokens, the flooder's own run, then the users, SSE clients, pollers and the
    fault injector as tasks, until every run ended (or the deadline passed)."""
    rng = random.Random(opts.seed)
    tokens = make_tokens(lab.url, opts)
    load = Load(opts, lab, tokens, rec, rng)
    faults = Faults(load)
    rec.t0, rec.loadavg_start = now(), round(os.getloadavg()[0], 2)
    flood_run = None
    async with httpx.AsyncClient(base_url=f"{lab.api_url}/api", headers=load.auth(tokens["flooder"]), timeout=30) as c:
        r = await c.post("/runs", json={"config": tiny_config("grpo", opts.steps, opts.batch_prompts)})
        if r.status_code == 201:
            flood_run = r.json()["id"]
            rec.accepted[flood_run] = {"user": "soak-flooder", "t": now()}
    users = list(tokens["users"].items())
    shares = [opts.runs // len(users) + (1 if i < opts.runs % len(users) else 0) for i in range(len(users))]
    plan, flood_at = plan_faults(opts)
    tasks = [asyncio.create_task(load.monitor())]
    opening = min(shares[0], 4 * opts.workers)  # user 0 opens with a backlog; the others arrive behind it
    subs = [asyncio.create_task(load.submitter(u, t, shares[i], i * opts.user_stagger_s, random.Random(opts.seed * 100 + i),
                                               opening if i == 0 else 0)) for i, (u, t) in enumerate(users)]
    tasks += [asyncio.create_task(load.sse_client(i, t, random.Random(opts.seed * 1000 + i))) for i, t in enumerate(tokens["sse"])]
    tasks += [asyncio.create_task(load.poller(i, t, random.Random(opts.seed * 2000 + i))) for i, t in enumerate(tokens["pollers"])]
    inj = asyncio.create_task(faults.injector(plan, flood_at, tokens["flooder"], flood_run))
    deadline = time.monotonic() + (opts.timeout_s or (opts.duration() + 300 + 30 * (opts.runs + 1) / max(1, opts.workers)))
    try:
        await asyncio.gather(*subs)
        rec.done_submitting = True
        log(opts, f"all {len(rec.accepted)} runs submitted; waiting for them to end")
        while time.monotonic() < deadline:
            await asyncio.sleep(1)
            if not inj.done():
                continue
            try:  # a snapshot of its own, taken now: the monitor's may predate the last submissions
                runs = await asyncio.to_thread(snapshot, lab.url)
            except Exception:  # noqa: BLE001 - the store may be restarting
                continue
            if all(rid in runs for rid in rec.accepted) and all(r.status in TERMINAL for r in runs.values()) \
                    and all(rid in rec.files for rid in runs):
                break
        else:
            log(opts, "deadline reached with runs still active")
        if not inj.done():
            rec.stop = True
            await inj
    finally:
        rec.stop = True
        for t in tasks + subs + [inj]:
            t.cancel()
        await asyncio.gather(*tasks, *subs, inj, return_exceptions=True)


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def run(opts: Options) -> dict:
    """Start everything, soak, check, clean up; the report (``report["violations"]`` empty when every invariant held)."""
    made_root = opts.base_dir is None
    root = Path(tempfile.mkdtemp(prefix="aero-soak-")) if made_root else Path(opts.base_dir)
    root.mkdir(parents=True, exist_ok=True)
    lab = Lab(opts, root)
    rec = Record()
    prev = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM cleans up like Ctrl-C
    try:
        log(opts, f"services in {root}")
        import torch  # noqa: F401 - the checkpoint checks load it; imported now, not in the middle of the measurements

        lab.start_services()
        lab.start_platform()
        log(opts, f"API {lab.api_url}, {len(lab.workers)} workers, store {lab.url.split('@')[-1]}")
        asyncio.run(drive(opts, lab, rec))
        report = analyse(opts, lab, rec)
        report["setup"]["root"] = str(root) if opts.keep else None
        return report
    except BaseException:
        for p in lab.all_procs[-6:]:
            print(f"--- {p.name} (alive={p.alive()})\n{p.tail(15)}", file=sys.stderr)
        raise
    finally:
        lab.close()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, prev)
        if not opts.keep:
            shutil.rmtree(root, ignore_errors=True)
