"""Same-seed metrics of every registered method on each engine, to show a refactor changed
nothing (or exactly which keys it changed).

    python scripts/metrics_fingerprint.py run --out before.json            # on one revision
    python scripts/metrics_fingerprint.py run --out after.json             # on the other
    python scripts/metrics_fingerprint.py compare before.json after.json   # keys that differ, per run

To fingerprint an older revision, run this file with that revision's tree first on the path:
``git worktree add /tmp/base REV && cd /tmp/base && PYTHONPATH=/tmp/base python
/path/to/scripts/metrics_fingerprint.py run --out before.json`` (the script imports only names that have been stable: parse_run_config,
for_method, MemorySink, the method registry, and the run entry point, each wherever it lives:
:func:`_moved` tries today's module, then the older ones).

Each run: the tiny preset (``--preset tiny-countdown``: countdown), 4 steps, seed 0, evals at steps 0, 2
and 4. Wall-clock keys
(``time/*``, ``system/*``, AERO's ``savings/*_s``) differ run to run and are left out; everything else (tokens, FLOPs,
rewards, advantages, losses, Avg@k) must match to the last bit on the same machine.

On the embedded engine a run is bit-reproducible, so any difference is the change's. verl's runs
were not before 2026-12-07 (its rollout server drew from one stream in request-arrival order: two
runs of one seed differed from step 1); since then its HF rollout server keys each sample's draws
by its request (trainer/verl/plugins/hf_rollout.py), and two runs of one seed store the same
metrics but the server's batched-call count (benchmarks/verl_determinism.py), so ``--engines
verl`` fingerprints from such revisions compare too; tests/trainer/verl/test_parity.py
(scripted sampling, both engines) remains the evidence across engines.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after PYTHONPATH: a base revision comes first

WALL_CLOCK = ("time/", "system/")


def is_wall_clock(key: str) -> bool:
    """Keys measured in seconds (or derived from them: AERO's savings in seconds are trained
    tokens times the step's measured seconds per token), which differ run to run."""
    return key.startswith(WALL_CLOCK) or (key.startswith("savings/") and key.endswith("_s"))
BASE = {"preset": "tiny", "steps": 4, "seed": 0, "batch_prompts": 8, "n_total": 8, "eval_every": 2,
        "eval_problems": 16, "eval_n": 4, "checkpoint_every": 0, "device": "cpu", "aero": {"n_explore": 4}}
ENGINE_SETTINGS = {"embedded": {}, "verl": {"engine": "verl", "shuffle_mini_batches": False}}


def _moved(name: str, *modules: str) -> Any:
    """``name`` from the first of ``modules`` this revision has (today's first, then older ones)."""
    import importlib

    for module in modules:
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError:
            continue
        if hasattr(found, name):
            return getattr(found, name)
    raise ImportError(f"{name} is in none of {', '.join(modules)}")


def _run_training():
    # today trainer/platform/run.py; before trainer/platform/, trainer/engines.py; before the
    # engine registry, the embedded loop
    return _moved("run_training", "trainer.platform.run", "trainer.engines", "trainer.embedded.loop")


def _engines_of(spec) -> tuple[str, ...]:
    return tuple(spec.needs.engines)


def fingerprint_one(method: str, engine: str, preset: str = "tiny") -> dict[str, Any]:
    from trainer.methods.spec import get_method

    # trainer/spec/ and trainer/platform/ hold them today; older revisions, trainer/'s root
    for_method, parse_run_config = (_moved(n, "trainer.spec.config", "trainer.config")
                                    for n in ("for_method", "parse_run_config"))
    MemorySink = _moved("MemorySink", "trainer.platform.sinks", "trainer.sinks")

    data = {**BASE, **ENGINE_SETTINGS[engine], "method": method, "preset": preset}
    if get_method(method).needs.prompt_ids:
        data["train_size"] = 64
    cfg = parse_run_config(for_method(data, method))
    sink = MemorySink()
    with tempfile.TemporaryDirectory() as out:
        summary = _run_training()(cfg, out, sink)
    steps = {str(s): {k: v for k, v in sorted(m.items()) if not is_wall_clock(k)}
             for s, m in sorted(sink.steps.items())}
    evals = {str(s): {b: {k: r[k] for k in ("k", "avg_at_k", "pass_at_k") if k in r} for b, r in sorted(res.items())}
             for s, res in sorted(sink.evals.items())}
    return {"status": summary["status"], "last_step": summary["last_step"], "steps": steps, "evals": evals}


def run(args) -> None:
    from trainer.methods.spec import specs

    engines = args.engines.split(",")
    methods = args.methods.split(",") if args.methods else [s.name for s in specs()]
    result: dict[str, Any] = {}
    if Path(args.out).exists():
        result = json.loads(Path(args.out).read_text())  # resume: keep what an earlier call recorded
    for method in methods:
        from trainer.methods.spec import get_method

        for engine in engines:
            key = f"{method}@{engine}"
            if key in result or engine not in _engines_of(get_method(method)):
                continue
            print(f"[fingerprint] {key}", file=sys.stderr, flush=True)
            result[key] = fingerprint_one(method, engine, args.preset)
            Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True))
    print(f"{len(result)} runs in {args.out}")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def compare(args) -> int:
    before, after = (json.loads(Path(p).read_text()) for p in (args.before, args.after))
    changed: dict[str, dict[str, tuple[Any, Any]]] = {}
    for key in sorted(set(before) | set(after)):
        if key not in before or key not in after:
            print(f"{key}: only in {'after' if key in after else 'before'}")
            continue
        a, b = before[key], after[key]
        for side in (a, b):  # fingerprints recorded before a key counted as wall-clock
            side["steps"] = {st: {k: v for k, v in m.items() if not is_wall_clock(k)} for st, m in side["steps"].items()}
        for section in ("steps", "evals"):
            for step in sorted(set(a[section]) | set(b[section]), key=int):
                ma, mb = a[section].get(step, {}), b[section].get(step, {})
                for k in sorted(set(ma) | set(mb)):
                    if not _same(ma.get(k, "absent"), mb.get(k, "absent")):
                        changed.setdefault(key, {})[f"{section}[{step}] {k}"] = (ma.get(k, "absent"), mb.get(k, "absent"))
    same = sorted(set(before) & set(after) - set(changed))
    print(f"identical: {len(same)} runs ({', '.join(same)})")
    by_key: dict[str, list[float]] = {}
    for diffs in changed.values():
        for where, (x, y) in diffs.items():
            rel = abs(x - y) / max(abs(x), abs(y), 1e-30) if isinstance(x, float) and isinstance(y, float) else math.inf
            by_key.setdefault(where.split(" ", 1)[1], []).append(rel)
    for k, rels in sorted(by_key.items()):
        print(f"key {k}: differs in {len(rels)} values, max relative difference {max(rels):.2g}")
    for key, diffs in changed.items():
        print(f"{key}: {len(diffs)} values differ")
        for where, (x, y) in list(diffs.items())[: args.show]:
            print(f"  {where}: {x} -> {y}")
    return 1 if changed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="fingerprint the registered methods on the given engines")
    r.add_argument("--out", required=True)
    r.add_argument("--engines", default="embedded", help="comma-separated: embedded,verl (verl needs its venv)")
    r.add_argument("--methods", default="", help="comma-separated; default every registered method")
    r.add_argument("--preset", default="tiny", help="the shipped preset every run starts from (tiny-countdown trains "
                   "countdown)")
    c = sub.add_parser("compare", help="which keys differ between two fingerprints")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--show", type=int, default=12, help="differing values shown per run")
    args = p.parse_args()
    if args.cmd == "run":
        run(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
