"""``python -m trainer.verl --config run.json --out runs/qwen-aero [--set key=value ...]``

Runs one engine='verl' run on the local Ray cluster (or the one RAY_ADDRESS points at) and
writes OUT/metrics.jsonl and OUT/evals.jsonl, like ``aero train`` does for the embedded engine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common.dotted import set_path


def _set(data: dict, dotted: str) -> None:
    key, _, raw = dotted.partition("=")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    set_path(data, key, value)


def main(argv: list[str] | None = None) -> dict:
    from trainer.sinks import JsonlSink
    from trainer.verl.runner import run_verl

    ap = argparse.ArgumentParser(prog="python -m trainer.verl", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, required=True, help="JSON run config (engine is forced to 'verl')")
    ap.add_argument("--out", type=Path, required=True, help="run directory (shared by every node)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="override key=value (dotted, JSON values)")
    a = ap.parse_args(argv)
    data = json.loads(a.config.read_text())
    for s in a.sets:
        _set(data, s)
    data.update(engine="verl", preset=None)
    summary = run_verl(data, a.out, JsonlSink(a.out), progress=lambda s, n, m: print(f"step {s}/{n}", flush=True))
    print(json.dumps({k: v for k, v in summary.items() if k != "final_eval"}))
    return summary


if __name__ == "__main__":
    main()
