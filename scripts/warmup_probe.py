#!/usr/bin/env python3
"""Where the first generate call's extra time goes: a fresh process's first call against an
identical second one, per decode path, split by phase and by decode step, with the CUDA caching
allocator's activity during each, and the update's first call against its second.

    python scripts/warmup_probe.py --shape qwen2.5-1.5b --rows 512 --tokens 128 --json warmup.json  # one GPU
    python scripts/warmup_probe.py --shape tiny-151k --rows 4 --tokens 8 --update-prompts 1 \
        --update-n 4 --update-max-new 32                                                         # anywhere

Each decode of ``--decodes`` (default dynamic,static,graphs) runs in a process of its own, so its
first call is as cold as a run's first generation: the process imports torch, initialises the
device (CUDA context), builds the shape with random weights directly on the device (as a run of a
shape does: no move), switches to the packed grouped-query decode on CUDA (as runs do), then makes
the same ``generate`` call twice (``--rows`` rows of 100-200-token prompts, 16 rows per prompt,
``--tokens`` new tokens, seed 0). Random weights never sample the stop id, so both calls decode
``--tokens`` steps and sample the same tokens.

Per call: wall seconds (bracketed by ``torch.cuda.synchronize()`` on CUDA); the prefill (call start
to the first token's sampling); every decode step (one sampling call to the next: step t's forward
plus step t-1's bookkeeping) on the host clock and, on CUDA, on the device's clock (CUDA events, no
added sync); the tail (last sampling to the call's end). On CUDA also the caching allocator's
counters over the call (``torch.cuda.memory_stats()`` deltas: ``segment.all.allocated`` = cudaMalloc
calls, ``num_device_alloc`` / ``num_device_free``, ``num_alloc_retries`` = failed cudaMallocs that
flushed the cache (each a device-wide sync), bytes allocated and reserved), the device allocations
(cudaMalloc or cuMemMap) of each decode step, the peak allocated, and for ``graphs`` the CUDA-graph captures and their seconds.

Per decode: ``warmup_s`` = first call - second call, split exactly into ``split``: prefill, the
first ``--first-steps`` decode steps (first launches: kernel loading, library handles, per-shape
heuristics), the remaining steps (cost paid on every step of a cold call: allocator growth) and
the tail; on CUDA also the first call's excess per step on steps that allocated device memory
against steps that did not. ``steady_ms_per_step`` is the second call's median step: the steady-state
figure, reported apart from the warm-up. The decode paths do no ``torch.compile``.

``--expandable`` (default: the first decode) reruns those decodes in a process started with
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (it must be set before CUDA initialises):
segments that grow in place instead of one cudaMalloc per new size. ``allocator_share_s`` is the
default allocator's warm-up minus the expandable one's, per decode (CUDA only).

``--update-prompts P`` (0: skip) runs scripts/update_probe.py in its own process for two update
calls of P x ``--update-n`` synthetic rows: ``update.warmup_s`` = first call - second call.

``--budget-s`` bounds the whole probe: each process gets what is left, one that would start with
less than 10 s is skipped (``skipped`` in its entry), and the JSON is rewritten after every
process, so a probe cut short keeps what it finished. Prints a table, and the JSON to ``--json``
(or to stdout without it). Fields that only CUDA has are null on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DECODES = ("dynamic", "static", "graphs")
EXPANDABLE = "expandable_segments:True"
ALLOC_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")  # torch reads either (the second since 2.9)
# torch.cuda.memory_stats() counters whose change over a call is reported (those this torch has)
ALLOC_STATS = ("segment.all.allocated", "segment.all.freed", "num_device_alloc", "num_device_free",
               "num_alloc_retries", "num_sync_all_streams", "num_ooms", "allocation.all.allocated",
               "allocated_bytes.all.allocated", "reserved_bytes.all.allocated", "reserved_bytes.all.freed")
MIN_CHILD_S = 10.0  # a process started with less time than this is skipped


# ---- the allocator's counters (update_probe.py uses these too) ----------------------------------

def alloc_stats(device) -> dict[str, int] | None:
    """The counters of :data:`ALLOC_STATS` this torch reports; None off CUDA."""
    import torch

    if torch.device(device).type != "cuda":
        return None
    stats = torch.cuda.memory_stats(device)
    return {k: int(stats[k]) for k in ALLOC_STATS if k in stats}


def alloc_delta(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, float] | None:
    """What changed over a span; byte counters in MiB (``*_mb``)."""
    if before is None or after is None:
        return None
    out: dict[str, float] = {}
    for k in after:
        d = after[k] - before.get(k, 0)
        if "_bytes" in k:
            out[k.replace("_bytes", "_mb")] = d / 2**20
        else:
            out[k] = d
    return out


# ---- per-step marks inside generate -------------------------------------------------------------

class Marks:
    """Time marks of one generate call: its start, the entry of every sampling call (one per
    decode step, the first samples from the prefill), its end. On CUDA each mark also records a
    CUDA event (the device's clock, no sync) and the allocator's device allocations so far
    (``num_device_alloc``: cudaMalloc and cuMemMap calls; ``segment.all.allocated`` on a torch without it)."""

    def __init__(self, device):
        import torch

        self.cuda = torch.device(device).type == "cuda"
        self.device = device
        self.host: list[float] = []
        self.events: list[Any] = []
        self.allocs: list[int] = []

    def mark(self) -> None:
        import torch

        self.host.append(time.perf_counter())
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.events.append(ev)
            stats = torch.cuda.memory_stats(self.device)  # cuMemMap calls too: expandable segments grow by those
            self.allocs.append(int(stats.get("num_device_alloc", stats.get("segment.all.allocated", 0))))

    def device_ms(self) -> list[float] | None:
        """Milliseconds between consecutive marks on the device's clock (after a sync)."""
        if not self.cuda:
            return None
        self.events[-1].synchronize()
        return [a.elapsed_time(b) for a, b in zip(self.events, self.events[1:])]


class Instruments:
    """Patches the sampler's per-step sampling functions (dynamic: ``trainer.rollout.embedded.
    sample_next``; static and graphs: ``trainer.rollout.static_decode.sample_step``) to mark each
    step, and ``BucketGraphs.capture`` to time each CUDA-graph capture; undone on exit. A hook
    point the sampler no longer has is an error naming it, not a silent probe without steps."""

    HOOKS = (("trainer.rollout.embedded", "sample_next"), ("trainer.rollout.static_decode", "sample_step"))

    def __init__(self, device):
        self.device = device
        self.marks = Marks(device)
        self.captures: list[float] = []
        self._undo: list[Callable[[], None]] = []

    def __enter__(self) -> Instruments:
        import importlib

        from trainer.rollout.decode_graphs import BucketGraphs

        try:
            for module_name, attr in self.HOOKS:
                module = importlib.import_module(module_name)
                if not hasattr(module, attr):
                    raise RuntimeError(f"{module_name} has no {attr}: the warm-up probe marks decode steps there; "
                                       "update Instruments.HOOKS to the sampler's per-step sampling function")
                self._patch(module, attr, self._marked(getattr(module, attr)))
            self._patch(BucketGraphs, "capture", self._timed_capture(BucketGraphs.capture))
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo = []

    def _patch(self, owner, attr: str, new) -> None:
        old = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        setattr(owner, attr, new)
        self._undo.append(lambda: setattr(owner, attr, old))

    def _marked(self, fn):
        def marked(*args, **kwargs):
            self.marks.mark()
            return fn(*args, **kwargs)
        return marked

    def _timed_capture(self, capture):
        captures = self.captures

        def timed(graphs, b: int) -> None:
            import torch

            torch.cuda.synchronize()
            t0 = time.perf_counter()
            try:
                capture(graphs, b)
            finally:  # a failed capture is the sampler's to report (it decodes eagerly): keep its error
                with contextlib.suppress(RuntimeError):
                    torch.cuda.synchronize()
                captures.append(time.perf_counter() - t0)
        return timed

    def begin(self) -> None:
        self.marks = Marks(self.device)
        self.captures.clear()
        self.marks.mark()


def sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def call_record(marks: Marks, captures: list[float], first_steps: int) -> dict:
    """One call's figures from its marks (module docstring). ``step_ms[i]`` is decode step i + 1
    (step 0 samples from the prefill, so its time is the prefill's)."""
    host = marks.host
    gaps = [1000 * (b - a) for a, b in zip(host, host[1:])]
    dev = marks.device_ms()
    steps = gaps[1:-1]
    rec: dict[str, Any] = {
        "seconds": host[-1] - host[0], "sampling_calls": len(host) - 2,
        "prefill_s": gaps[0] / 1000, "tail_s": gaps[-1] / 1000, "step_ms": steps,
        "first_step_ms": steps[0] if steps else None, "first_n_ms": sum(steps[:first_steps]),
        "rest_ms": sum(steps[first_steps:]), "median_step_ms": statistics.median(steps) if steps else None,
        "device_step_ms": dev[1:-1] if dev is not None else None,
        "device_prefill_s": dev[0] / 1000 if dev is not None else None,
        "step_device_allocs": None, "graph_captures": None, "graph_capture_s": None}
    if dev is not None:
        rec["device_median_step_ms"] = statistics.median(dev[1:-1]) if len(dev) > 2 else None
        n = marks.allocs
        rec["step_device_allocs"] = [b - a for a, b in zip(n[1:], n[2:-1])]
        rec["graph_captures"], rec["graph_capture_s"] = len(captures), sum(captures)
    else:
        rec["device_median_step_ms"] = None
    return rec


def measured_call(engine, prompts, counts, sampling, inst: Instruments, first_steps: int) -> tuple[list, dict]:
    """One generate call from seed 0 with every instrument on: (rollouts, its record)."""
    import torch

    dev = engine.device
    cuda = dev.type == "cuda"
    sync(dev)
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    before = alloc_stats(dev)
    inst.begin()
    rollouts = engine.generate(prompts, counts, sampling, torch.Generator(device=dev).manual_seed(0))
    sync(dev)
    inst.marks.mark()
    after = alloc_stats(dev)
    rec = call_record(inst.marks, inst.captures, first_steps)
    rec["decode_steps"] = max(r.length for r in rollouts)
    rec["allocator"] = alloc_delta(before, after)
    rec["peak_allocated_mb"] = torch.cuda.max_memory_allocated(dev) / 2**20 if cuda else None
    rec["reserved_mb"] = torch.cuda.memory_reserved(dev) / 2**20 if cuda else None
    return rollouts, rec


def warmup_split(first: dict, second: dict, first_steps: int) -> dict:
    """The first call's excess over the second, by phase; the parts sum to ``warmup_s``. On CUDA
    also its excess per step on steps that allocated device memory against steps that did not."""
    n = min(len(first["step_ms"]), len(second["step_ms"]))
    excess = [a - b for a, b in zip(first["step_ms"][:n], second["step_ms"][:n])]
    out: dict[str, Any] = {
        "prefill_s": first["prefill_s"] - second["prefill_s"],
        "first_steps_s": (first["first_n_ms"] - second["first_n_ms"]) / 1000,
        "rest_steps_s": (first["rest_ms"] - second["rest_ms"]) / 1000,
        "tail_s": first["tail_s"] - second["tail_s"],
        "graph_capture_s": None, "steps_with_device_allocs": None,
        "excess_ms_per_step_with_device_allocs": None, "excess_ms_per_step_without": None}
    if first["graph_capture_s"] is not None and second["graph_capture_s"] is not None:
        out["graph_capture_s"] = first["graph_capture_s"] - second["graph_capture_s"]
    allocs = first["step_device_allocs"]
    if allocs is not None:
        with_new = [e for e, n in zip(excess, allocs) if n > 0]
        without = [e for e, n in zip(excess, allocs) if n == 0]
        out["steps_with_device_allocs"] = len(with_new)
        out["excess_ms_per_step_with_device_allocs"] = statistics.fmean(with_new) if with_new else None
        out["excess_ms_per_step_without"] = statistics.fmean(without) if without else None
    return out


def probe_rows(rows: int) -> tuple[list[list[int]], list[int]]:
    """scripts/decode_probe.py's rows: 100-200-token prompts of random ids, 16 rows per prompt."""
    import numpy as np

    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 150_000, size=int(rng.integers(100, 201))).tolist() for _ in range(max(1, rows // 16))]
    return prompts, [max(1, rows // len(prompts))] * len(prompts)


def run_decode(a: argparse.Namespace) -> dict:
    """One decode in this (fresh) process: the child's whole job."""
    t0 = time.perf_counter()
    import torch

    from trainer.embedded.shapes import build_shape_model
    from trainer.rollout.attention import use_packed_gqa
    from trainer.rollout.base import SamplingParams
    from trainer.rollout.embedded import HFSampler

    out: dict[str, Any] = {"decode": a.child, "alloc_conf": {k: os.environ.get(k) for k in ALLOC_ENV},
                           "import_s": time.perf_counter() - t0, "torch": torch.__version__}
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    out["device"] = torch.cuda.get_device_name(device) if cuda else "cpu"
    out["device_init_s"] = None
    if cuda:  # the CUDA context and the allocator's first segment, kept out of the build
        t0 = time.perf_counter()
        torch.zeros(1, device=device)
        torch.cuda.synchronize(device)
        out["device_init_s"] = time.perf_counter() - t0
        out["allocator_backend"] = torch.cuda.get_allocator_backend()
    t0 = time.perf_counter()
    model = build_shape_model(a.shape, device, torch.float32, seed=0)
    sync(device)
    out["build_s"] = time.perf_counter() - t0
    out["params"] = sum(p.numel() for p in model.parameters())
    out["packed_gqa"] = use_packed_gqa(model) if cuda else False  # as a run on CUDA (presets.load_setup)
    config: Any = model.config
    eos = a.eos_id if a.eos_id is not None else int(config.vocab_size) - 1
    engine = HFSampler(model, eos_id=eos, pad_id=0, dtype=torch.bfloat16 if cuda else None, decode=a.child,
                       sync_every=a.sync_every)
    prompts, counts = probe_rows(a.rows)
    out["rows"] = sum(counts)
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=a.tokens)
    with warnings.catch_warnings(record=True) as caught, Instruments(device) as inst:
        warnings.simplefilter("always")
        r1, out["first"] = measured_call(engine, prompts, counts, sampling, inst, a.first_steps)
        r2, out["second"] = measured_call(engine, prompts, counts, sampling, inst, a.first_steps)
    out["warnings"] = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    out["same_tokens"] = all(x.response_ids == y.response_ids for x, y in zip(r1, r2))
    out["warmup_s"] = out["first"]["seconds"] - out["second"]["seconds"]
    out["split"] = warmup_split(out["first"], out["second"], a.first_steps)
    out["steady_ms_per_step"] = out["second"]["median_step_ms"]
    out["steady_device_ms_per_step"] = out["second"]["device_median_step_ms"]
    return out


# ---- the parent: one process per decode, the expandable variant, the update --------------------

@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="warmup_probe_") as d:
        yield Path(d)


def run_child(name: str, cmd: list[str], env: dict[str, str], deadline: float | None, json_path: Path) -> dict:
    """Run one process that writes ``json_path``; its JSON, or an entry saying why there is none."""
    left = None if deadline is None else deadline - time.monotonic()
    if left is not None and left < MIN_CHILD_S:
        return {"skipped": f"budget: {max(left, 0):.0f} s left"}
    t0 = time.monotonic()
    print(f"[warmup_probe] {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=left, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {time.monotonic() - t0:.0f} s (budget)"}
    if proc.returncode != 0 or not json_path.exists():
        sys.stderr.write(proc.stderr[-4000:])
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {last}"[:2000]}
    out = json.loads(json_path.read_text())
    out["process_s"] = time.monotonic() - t0
    return out


def child_cmd(a: argparse.Namespace, decode: str, json_path: Path) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--shape", a.shape, "--rows", str(a.rows),
           "--tokens", str(a.tokens), "--first-steps", str(a.first_steps), "--child", decode,
           "--child-json", str(json_path)]
    if a.sync_every is not None:
        cmd += ["--sync-every", str(a.sync_every)]
    if a.eos_id is not None:
        cmd += ["--eos-id", str(a.eos_id)]
    return cmd


def update_cmd(a: argparse.Namespace, json_path: Path) -> list[str]:
    return [sys.executable, str(ROOT / "scripts" / "update_probe.py"), "--shape", a.shape,
            "--prompts", str(a.update_prompts), "--n", str(a.update_n), "--max-new", str(a.update_max_new),
            "--checkpointing", a.update_checkpointing, "--calls", "2", "--json", str(json_path)]


def names(text: str) -> list[str]:
    out = [d.strip() for d in text.split(",") if d.strip()]
    bad = [d for d in out if d not in DECODES]
    if bad:
        raise SystemExit(f"unknown decode(s) {bad}; choose from {', '.join(DECODES)}")
    return out


def allocator_share(decodes: dict, expandable: dict) -> dict[str, float | None]:
    """Per decode run both ways: the default allocator's warm-up minus the expandable one's (CUDA only)."""
    out: dict[str, float | None] = {}
    for d, e in expandable.items():
        base = decodes.get(d, {})
        ok = "warmup_s" in base and "warmup_s" in e and e.get("device") != "cpu"
        out[d] = base["warmup_s"] - e["warmup_s"] if ok else None
    return out


def probe(a: argparse.Namespace) -> dict:
    decodes, expandable = names(a.decodes), names(a.expandable) if a.expandable else []
    deadline = time.monotonic() + a.budget_s if a.budget_s is not None else None
    t0 = time.monotonic()
    out: dict[str, Any] = {"probe": "warmup", "shape": a.shape, "rows": a.rows, "tokens": a.tokens,
                           "first_steps": a.first_steps, "budget_s": a.budget_s, "decodes": {}, "expandable": {},
                           "allocator_share_s": {}, "update": None}
    base_env = dict(os.environ)
    exp_env = {**base_env, **{k: EXPANDABLE for k in ALLOC_ENV}}
    jobs: list[tuple[str, str, dict[str, str]]] = []
    for d in decodes:
        jobs.append(("decodes", d, base_env))
        if d in expandable:
            jobs.append(("expandable", d, exp_env))
    jobs += [("expandable", d, exp_env) for d in expandable if d not in decodes]
    with scratch() as tmp:
        for i, (group, d, env) in enumerate(jobs):
            path = tmp / f"{i}.json"
            out[group][d] = run_child(f"{group} {d}", child_cmd(a, d, path), env, deadline, path)
            first = out[group][d]
            for key in ("device", "torch", "params"):
                if key in first and key not in out:
                    out[key] = first[key]
            out["allocator_share_s"] = allocator_share(out["decodes"], out["expandable"])
            write(a, out)
        if a.update_prompts > 0:
            path = tmp / "update.json"
            out["update"] = run_child("update", update_cmd(a, path), base_env, deadline, path)
    out["wall_s"] = time.monotonic() - t0
    write(a, out)
    return out


def write(a: argparse.Namespace, out: dict) -> None:
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen2.5-1.5b")
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--first-steps", type=int, default=16, help="the first decode steps compared apart (N)")
    ap.add_argument("--decodes", default=",".join(DECODES))
    ap.add_argument("--expandable", default=None, help="decodes to rerun with expandable segments "
                    "(default: the first of --decodes; '' for none)")
    ap.add_argument("--sync-every", type=int, default=None, help="the static decodes' steps between host reads")
    ap.add_argument("--eos-id", type=int, default=None, help="stop token (default: the last id, never sampled)")
    ap.add_argument("--update-prompts", type=int, default=4, help="update rows: prompts (0: no update)")
    ap.add_argument("--update-n", type=int, default=16)
    ap.add_argument("--update-max-new", type=int, default=1536)
    ap.add_argument("--update-checkpointing", choices=("on", "off"), default="on")
    ap.add_argument("--budget-s", type=float, default=None, help="seconds for the whole probe")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, choices=DECODES, help=argparse.SUPPRESS)
    ap.add_argument("--child-json", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.first_steps < 1:
        ap.error("--first-steps must be >= 1")
    if a.child:
        out = run_decode(a)
        Path(a.child_json).write_text(json.dumps(out))
        return out
    if a.expandable is None:
        a.expandable = names(a.decodes)[0] if names(a.decodes) else ""
    out = probe(a)
    from warmup_report import print_table  # beside this file (sys.path[0] when run as a script)

    print_table(out)
    if not a.json:
        print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
