"""How our GRPO step on the embedded engine scales (issue 14, item 4): step time and peak
memory as batch_prompts, n_total and the response length grow, and a profile of one step.

Each point runs in a fresh subprocess (``--point``) with ``--threads`` torch threads: one
warm-up step, then ``--steps`` measured steps of the step benchmarks/trl_compare.py times (the
tiny policy, the arithmetic stream, the same split: generation, scoring, forward,
backward_opt). Peak memory is the subprocess's ``ru_maxrss`` (tracemalloc does not see
torch's allocations), with the RSS after loading the model beside it, so the difference is
what the steps added.

The response-length axis: the tiny policy answers in 2-5 tokens and stops, so a larger
max_new_tokens alone changes nothing. On that axis the engine gets a stop id outside the
vocabulary and every response runs to max_new_tokens (rewards are then 0; the update still
runs its full forward and backward), which is what a task with long answers costs.

    python benchmarks/scaling_bench.py --json scaling.json            # the grid + a profile
    python benchmarks/scaling_bench.py --quick                         # tiny sizes, a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BASE = {"prompts": 16, "n": 16, "max_new_tokens": 12, "forced": False}
GRID = {
    "batch_prompts": [{"prompts": p} for p in (16, 32, 64, 128, 256)],
    "n_total": [{"n": n} for n in (8, 16, 32, 64)],
    "response_length": [{"max_new_tokens": t, "forced": True} for t in (8, 16, 32, 64)],
}
QUICK = {
    "batch_prompts": [{"prompts": p} for p in (2, 4)],
    "n_total": [{"n": n} for n in (2, 4)],
    "response_length": [{"max_new_tokens": t, "forced": True} for t in (4, 8)],
}


def rss_mb() -> float:
    """Current resident set size (MB) of this process, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def make_runner(point: dict, seed: int = 0):
    """Our GRPO step (benchmarks/trl_compare.py) at ``point``; with ``forced`` the sampler never stops early."""
    from benchmarks.trl_compare import OursStep, tiny_config
    from trainer.rollout.embedded import HFSampler

    args = argparse.Namespace(prompts=point["prompts"], n=point["n"], max_new_tokens=point["max_new_tokens"],
                              lr=1e-4, entropy_coef=1e-3, seed=seed)
    runner = OursStep(tiny_config(args))
    if point["forced"]:
        s = runner.setup
        s.sampler = HFSampler(s.model, eos_id=s.model.config.vocab_size, pad_id=s.task.tokenizer.pad_id)
    return runner


def run_point(point: dict, steps: int, threads: int) -> dict:
    """In this (fresh) process: warm-up + ``steps`` steps; times, split and memory."""
    import torch

    torch.set_num_threads(threads)
    runner = make_runner(point)
    rss_loaded = rss_mb()
    runner.step()  # warm-up
    rows = [runner.step() for _ in range(steps)]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in ("total", "generation", "scoring", "forward", "backward_opt",
                                                              "tokens", "flops")}
    return {**point, "rows": point["prompts"] * point["n"], "steps": steps, **mean,
            "min_total": min(r["total"] for r in rows), "rss_loaded_mb": rss_loaded, "peak_rss_mb": peak}


def profile_point(point: dict, threads: int, top: int) -> dict:
    """One step under torch.profiler (top aten ops by self CPU time) and cProfile (top Python
    functions by own time), after a warm-up step."""
    import cProfile
    import pstats

    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(threads)
    runner = make_runner(point)
    runner.step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        split = runner.step()
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    cp = cProfile.Profile()
    cp.enable()
    runner.step()
    cp.disable()
    stats = pstats.Stats(cp).stats  # {(file, line, name): (cc, nc, tottime, cumtime, callers)}
    funcs = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    return {"point": point, "split": {k: split[k] for k in ("total", "generation", "scoring", "forward", "backward_opt")},
            "ops": [{"name": e.key, "self_ms": e.self_cpu_time_total / 1e3, "calls": e.count} for e in ops],
            "functions": [{"name": f"{Path(f).name}:{line}({name})", "own_ms": v[2] * 1e3, "calls": v[1]}
                          for (f, line, name), v in funcs]}


def spawn(point: dict, steps: int, threads: int, profile: bool = False, top: int = 12) -> dict:
    """Run a point (or the profile) in a fresh interpreter, so peak RSS is this point's alone."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--point", json.dumps(point), "--steps", str(steps),
           "--threads", str(threads), "--top", str(top)] + (["--profile-point"] if profile else [])
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"point {point} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def print_report(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=180)
    t = Table(title=f"our GRPO step vs size ({report['meta']['steps']} steps each after a warm-up, "
                    f"{report['meta']['threads']} threads; seconds, MB)")
    for c in ("axis", "P", "n", "max_new", "rows", "tokens", "step s", "gen", "score", "fwd", "bwd+opt",
              "GFLOP", "RSS loaded", "peak RSS"):
        t.add_column(c, justify="right")
    for r in report["points"]:
        t.add_row(r["axis"], str(r["prompts"]), str(r["n"]), f"{r['max_new_tokens']}{'*' if r['forced'] else ''}",
                  str(r["rows"]), f"{r['tokens']:.0f}", f"{r['total']:.3f}", f"{r['generation']:.3f}",
                  f"{r['scoring']:.3f}", f"{r['forward']:.3f}", f"{r['backward_opt']:.3f}", f"{r['flops'] / 1e9:.1f}",
                  f"{r['rss_loaded_mb']:.0f}", f"{r['peak_rss_mb']:.0f}")
    console.print(t)
    console.print("* responses forced to max_new_tokens (no stop token)")
    p = report.get("profile")
    if p:
        console.print(f"profile of one step at {p['point']}: " + ", ".join(f"{k} {v:.3f}s" for k, v in p["split"].items()))
        ops = Table(title="top aten ops (self CPU)")
        for c in ("op", "self ms", "calls"):
            ops.add_column(c, justify="right")
        for o in p["ops"]:
            ops.add_row(o["name"], f"{o['self_ms']:.1f}", str(o["calls"]))
        console.print(ops)
        fn = Table(title="top Python functions (own time, cProfile)")
        for c in ("function", "own ms", "calls"):
            fn.add_column(c, justify="right")
        for f in p["functions"]:
            fn.add_row(f["name"], f"{f['own_ms']:.1f}", str(f["calls"]))
        console.print(fn)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3, help="measured steps per point (after one warm-up)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the whole pipeline")
    ap.add_argument("--profile-at", default='{"prompts": 64, "n": 16, "max_new_tokens": 12, "forced": false}',
                    help="JSON point to profile ('' to skip)")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--point", help=argparse.SUPPRESS)  # internal: run one point in this process
    ap.add_argument("--profile-point", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.point:
        point = json.loads(args.point)
        result = profile_point(point, args.threads, args.top) if args.profile_point else run_point(point, args.steps, args.threads)
        print(json.dumps(result))
        return result
    t0 = time.perf_counter()
    base = {**BASE, **({"prompts": 2, "n": 2, "max_new_tokens": 4} if args.quick else {})}
    points = []
    for axis, changes in (QUICK if args.quick else GRID).items():
        for change in changes:
            r = spawn({**base, **change}, args.steps, args.threads)
            points.append({"axis": axis, **r})
            print(f"{axis} {change}: {r['total']:.3f} s, peak {r['peak_rss_mb']:.0f} MB", flush=True)
    prof_at = json.loads(args.profile_at) if args.profile_at else None
    if prof_at and args.quick:
        prof_at = {**prof_at, "prompts": 2, "n": 2, "max_new_tokens": 4}
    profile = spawn(prof_at, 1, args.threads, profile=True, top=args.top) if prof_at else None
    report = {"meta": {"steps": args.steps, "threads": args.threads, "wall_s": time.perf_counter() - t0},
              "points": points, "profile": profile}
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
