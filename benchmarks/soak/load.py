"""The submitted load: users' tokens, users submitting runs and sweeps over REST, SSE clients
following live metric streams, pollers reading metrics, the monitor that keeps the store's view
(and checks each ended run's files), and the flooding user's requests (from a process of its own)."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import httpx

from backend.api.server_timing import app_ms
from benchmarks.soak.analysis import check_files, snapshot
from benchmarks.soak.lab import ROOT, Lab
from benchmarks.soak.options import Options
from benchmarks.soak.record import TERMINAL, Follow, Record, Window, now


def tiny_config(method: str, steps: int, batch_prompts: int, seed: int = 0, max_staleness: int = 0) -> dict:
    """A run of a few seconds: the tiny preset, a small rollout budget, a checkpoint every step;
    ``max_staleness`` 1 trains asynchronously (the sampler one step ahead), so the invariants
    cover runs with steps in flight at a kill."""
    from trainer.spec.config import RunConfig, for_method

    cfg = dict(method=method, preset="tiny", steps=steps, batch_prompts=batch_prompts, n_total=4, max_new_tokens=8,
               eval_every=0, eval_problems=4, eval_n=2, checkpoint_every=1, device="cpu", seed=seed,
               aero=dict(n_explore=2, n_max=4, k_max=1), offpolicy=dict(max_staleness=max_staleness))
    return RunConfig(**for_method(cfg, method)).model_dump(mode="json")


class Load:
    """The users, SSE clients, pollers and the flooder on one event loop, each writing what it sees
    into the record; the faults (benchmarks/soak/faults.py) run beside them."""

    def __init__(self, opts: Options, lab: Lab, tokens: dict[str, Any], rec: Record, rng: random.Random):
        self.opts, self.lab, self.tokens, self.rec, self.rng = opts, lab, tokens, rec, rng
        self.api = lab.api_url

    def auth(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    # ------------------------------------------------------------ monitor + janitor

    async def monitor(self) -> None:
        checking: set[int] = set()
        pending_prune: list[int] = []
        while not self.rec.stop:
            if self.lab.disk.mounted and not self.rec.disk_full:
                while pending_prune:  # the runs' checkpoints, once checked: keeps the tmpfs small
                    shutil.rmtree(self.lab.disk.path / str(pending_prune.pop()) / "checkpoints", ignore_errors=True)
            try:
                self.rec.runs = await asyncio.to_thread(snapshot, self.lab.url)
            except Exception:  # noqa: BLE001 - the store may be restarting
                await asyncio.sleep(0.5)
                continue
            done = [r.id for r in self.rec.runs.values() if r.status in TERMINAL and r.id not in self.rec.files
                    and r.id not in checking]
            for rid in done[:4]:
                checking.add(rid)
                try:
                    self.rec.files[rid] = await asyncio.to_thread(check_files, self.lab.url, self.lab.disk.path, rid)
                    pending_prune.append(rid)
                except Exception:  # noqa: BLE001 - store restarting: next round
                    pass
                checking.discard(rid)
            await asyncio.sleep(0.5)

    # ------------------------------------------------------------ submitters

    async def submitter(self, user: str, token: str, share: int, delay: float, rng: random.Random,
                        opening: int = 0) -> None:
        """Submit ``share`` runs as single runs and sweeps: ``opening`` of them at once (a backlog
        for fair share to order), the rest spread over the soak's duration."""
        await asyncio.sleep(delay)
        end = self.rec.t0 + 0.85 * self.opts.duration()
        done, seed, submitted = 0, 0, 0
        async with httpx.AsyncClient(base_url=f"{self.api}/api", headers=self.auth(token), timeout=30) as c:
            while done < share and not self.rec.stop:
                left = share - done
                if opening > done:  # the opening backlog: both methods x as many seeds as it takes
                    methods = ["grpo", "aero"] if opening - done >= 2 else ["grpo"]
                    seeds = list(range(seed, seed + max(1, (opening - done) // len(methods))))
                elif left == 1 or rng.random() < 0.4:  # a single run
                    methods, seeds = [rng.choice(("grpo", "aero"))], [seed]
                else:  # a sweep: one or both methods x 1-3 seeds, within what is left
                    methods = ["grpo", "aero"] if left >= 2 and rng.random() < 0.5 else [rng.choice(("grpo", "aero"))]
                    k = max(1, min(rng.randint(1, 3), left // len(methods)))
                    seeds = list(range(seed, seed + k))
                n = len(methods) * len(seeds)
                stale = submitted % 2  # every other submission of a user trains asynchronously
                submitted += 1
                try:
                    if n == 1:
                        body = {"config": tiny_config(methods[0], self.opts.steps, self.opts.batch_prompts, seed, stale)}
                        r = await c.post("/runs", json=body)
                        ids = [r.json()["id"]] if r.status_code == 201 else []
                    else:
                        # the last method's config (AERO's when both: its section; GRPO's runs drop it)
                        base = tiny_config(methods[-1], self.opts.steps, self.opts.batch_prompts, max_staleness=stale)
                        r = await c.post("/sweeps", json={"name": f"soak-{user}", "base": base, "methods": methods,
                                                          "seeds": seeds})
                        ids = [x["id"] for x in r.json()["runs"]] if r.status_code == 201 else []
                    status: int | str = r.status_code
                except httpx.HTTPError as e:
                    status, ids = type(e).__name__, []
                self.rec.submissions[f"{'run' if n == 1 else 'sweep'} {status}"] += 1
                if ids:
                    if stale:
                        self.rec.submissions["asynchronous runs"] += len(ids)
                    t = now()
                    for rid in ids:
                        self.rec.accepted[rid] = {"user": user, "t": t}
                    done += len(ids)
                    seed += len(seeds)
                    if done < share and done >= opening:  # pace the rest: ~2.2 runs a batch until the end
                        batches = max(1.0, (share - done) / 2.2)
                        await asyncio.sleep(max(0.0, end - now()) / batches * (0.5 + rng.random()))
                elif status == 429:
                    await asyncio.sleep(float(r.headers.get("retry-after", 1)))
                else:  # refused (broker or store down: 503) or the API away: try again soon
                    await asyncio.sleep(1 + rng.random())

    # ------------------------------------------------------------ SSE clients

    def pick_run(self, rng: random.Random) -> int | None:
        """A running run, or (half the time, and when none runs) one of the next queued ones, so that
        the stream is open before the run's first step."""
        running = [r.id for r in self.rec.runs.values() if r.status == "running"]
        queued = sorted(r.id for r in self.rec.runs.values() if r.status == "queued")[: 2 * self.opts.workers]
        if queued and (not running or rng.random() < 0.5):
            return rng.choice(queued)
        return rng.choice(running) if running else None

    async def sse_client(self, i: int, token: str, rng: random.Random) -> None:
        timeout = httpx.Timeout(10, read=40)
        async with httpx.AsyncClient(base_url=f"{self.api}/api", headers=self.auth(token), timeout=timeout) as c:
            while not self.rec.stop:
                rid = self.pick_run(rng)
                if rid is None:
                    await asyncio.sleep(0.5)
                    continue
                f = Follow(client=i, run_id=rid)
                self.rec.follows.append(f)
                await self.follow(c, f)

    async def follow(self, c: httpx.AsyncClient, f: Follow) -> None:
        last: int | None = None
        first = True
        while not self.rec.stop:
            headers = {"Last-Event-ID": str(last)} if last is not None else {}
            if not first:
                f.reconnects += 1
                f.reconnects_with_id += last is not None
                f.reconnect_times.append(now())
            first = False
            t_conn = now()
            try:
                async with c.stream("GET", f"/runs/{f.run_id}/metrics/stream", params={"keys": "reward/mean"},
                                    headers=headers) as r:
                    self.rec.sse_statuses[r.status_code] += 1
                    if r.status_code == 429:
                        await asyncio.sleep(float(r.headers.get("retry-after", 1)))
                        continue
                    if r.status_code != 200:
                        await asyncio.sleep(1)
                        continue
                    event, data = None, None
                    async for line in r.aiter_lines():
                        if self.rec.stop:
                            return
                        if line.startswith("event:"):
                            event = line[6:].strip()
                        elif line.startswith("data:"):
                            data = line[5:].strip()
                        elif line == "" and event is not None and data is not None:
                            if event == "metrics":
                                step = json.loads(data)["step"]
                                f.events.append((step, now(), t_conn))
                                last = step
                            elif event == "end":
                                f.ended, f.end_status = True, json.loads(data).get("status")
                                return
                            event, data = None, None
            except (httpx.HTTPError, ValueError):
                self.rec.sse_statuses["transport error"] += 1
            await asyncio.sleep(0.3)

    # ------------------------------------------------------------ pollers

    async def poller(self, i: int, token: str, rng: random.Random) -> None:
        user = f"poller-{i}"
        async with httpx.AsyncClient(base_url=f"{self.api}/api", headers=self.auth(token), timeout=30) as c:
            while not self.rec.stop:
                ids = [r.id for r in self.rec.runs.values() if r.current_step >= 1]
                if not ids:
                    await asyncio.sleep(0.5)
                    continue
                rid = rng.choice(ids)
                t0, p0 = now(), time.perf_counter()
                try:
                    r = await c.get(f"/runs/{rid}/metrics", params={"keys": "reward/mean,time/step_s"})
                    status: int | str = r.status_code
                    app = app_ms(r.headers.get("server-timing"))
                    if r.status_code == 200 and app is not None:
                        self.rec.read_app_ms.append((t0, app))
                    if r.status_code == 429:
                        await asyncio.sleep(float(r.headers.get("retry-after", 1)))
                except httpx.HTTPError as e:
                    status = type(e).__name__
                self.rec.reads.append((t0, time.perf_counter() - p0, status, user))
                await asyncio.sleep(self.opts.poll_interval_s * (0.5 + rng.random()))

    # ------------------------------------------------------------ the flood

    async def flood(self, token: str, own_run: int | None) -> None:
        """The flood comes from a process of its own: from the harness' event loop, which also
        drives every SSE client and poller, a loaded box sent a third of the rate it reached alone."""
        opts = self.opts
        big = json.dumps({"config": tiny_config("grpo", 2, 2), "notes": "x" * (opts.max_body_bytes + 4096)})
        job = {"api": self.api, "token": token, "own_run": own_run, "rps": opts.flood_rps, "seconds": opts.flood_s,
               "big": big}
        child = await asyncio.create_subprocess_exec(sys.executable, "-m", "benchmarks.soak", "--flood-child",
                                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT)
        out, _ = await child.communicate(json.dumps(job).encode())
        if child.returncode != 0:
            raise RuntimeError(f"the flood process exited {child.returncode}")
        f = json.loads(out)
        by_status: Counter = Counter()
        for k, v in f["counts"].items():
            by_status[k.split(" ", 1)[1]] += v
        self.rec.flood = {"start": f["t0"], "end": f["t1"], "aimed_rps": opts.flood_rps, "requests": f["n"],
                          "sent_s": round(f["sent_s"], 2), "achieved_rps": round(f["n"] / max(f["sent_s"], 1e-9)),
                          "by_kind_status": f["counts"], "by_status": dict(by_status),
                          "429_with_retry_after": f["retry_after_ok"], "429_without_retry_after": f["retry_after_bad"]}
        self.rec.windows.append(Window("flood", f["t0"], f["t1"], {"requests": f["n"], "achieved_rps": self.rec.flood["achieved_rps"]}))


def make_tokens(url: str, opts: Options) -> dict[str, Any]:
    """Tokens made in the store (as ``aero token create`` does): members for the users, the flooder
    and the faults' own runs; viewers for the SSE clients and pollers."""
    from backend.db.tokens import create_token
    from backend.db.session import session_scope

    out: dict[str, Any] = {"users": {}, "sse": [], "pollers": []}
    with session_scope(url) as s:
        for i in range(opts.users):
            out["users"][f"soak-user-{i}"] = create_token(s, f"soak-user-{i}", "member")[1]
        out["flooder"] = create_token(s, "soak-flooder", "member")[1]
        out["target"] = create_token(s, "soak-target", "member")[1]  # the runs faults submit for themselves
        out["sse"] = [create_token(s, f"soak-sse-{i}", "viewer")[1] for i in range(opts.sse)]
        out["pollers"] = [create_token(s, f"soak-poll-{i}", "viewer")[1] for i in range(opts.pollers)]
    return out


async def flood_requests(job: dict) -> dict:
    """One user's flood (``--flood-child``: the job on stdin, the counts on stdout): an open loop at
    ``rps`` for ``seconds`` at most, a third each of oversized bodies (413), invalid configs (422)
    and valid PATCHes of the user's own run; a busy client falls behind rather than queueing."""
    counts: Counter = Counter()
    retry_after_ok = retry_after_bad = 0
    big, own_run, rps = job["big"].encode(), job["own_run"], job["rps"]
    bad = {"config": {"method": "grpo", "steps": "many", "no_such_field": 1}}
    n = max(1, int(rps * job["seconds"]))
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    sem = asyncio.Semaphore(256)
    headers = {"Authorization": f"Bearer {job['token']}"}
    async with httpx.AsyncClient(base_url=f"{job['api']}/api", headers=headers, timeout=10, limits=limits) as c:

        async def one(i: int) -> None:
            nonlocal retry_after_ok, retry_after_bad
            kind = ("oversized", "invalid", "valid")[i % 3]
            try:
                if kind == "oversized":
                    r = await c.post("/runs", content=big, headers={"content-type": "application/json"})
                elif kind == "invalid" or own_run is None:
                    r = await c.post("/runs", json=bad)
                else:
                    r = await c.patch(f"/runs/{own_run}", json={"tags": [f"flood-{i % 7}"]})
                counts[f"{kind} {r.status_code}"] += 1
                if r.status_code == 429:
                    ra = r.headers.get("retry-after", "")
                    if ra.isdigit() and int(ra) >= 1:
                        retry_after_ok += 1
                    else:
                        retry_after_bad += 1
            except httpx.HTTPError as e:
                counts[f"{kind} {type(e).__name__}"] += 1
            finally:
                sem.release()

        tasks = []
        t0, p0 = now(), time.perf_counter()
        for i in range(n):
            if time.perf_counter() - p0 >= job["seconds"]:
                break
            delay = p0 + i / rps - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await sem.acquire()
            tasks.append(asyncio.create_task(one(i)))
        sent_s = time.perf_counter() - p0
        await asyncio.gather(*tasks)
        t1 = now()
    return {"t0": t0, "t1": t1, "n": len(tasks), "sent_s": sent_s, "counts": dict(counts),
            "retry_after_ok": retry_after_ok, "retry_after_bad": retry_after_bad}
