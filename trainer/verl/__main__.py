"""``python -m trainer.verl --config run.json --out runs/qwen-aero [--set key=value ...]``

Runs one engine='verl' run on the local Ray cluster (or the one RAY_ADDRESS points at) and
writes OUT/metrics.jsonl and OUT/evals.jsonl, like ``aero train`` does for the embedded engine.

The config is parsed as ``aero train`` parses it: ``parse_run_config`` with the operator's
policy from the environment (``RunPolicy.from_env``: the ``AERO_MAX_*`` caps; paths are
unrestricted unless ``AERO_DATA_ROOTS`` is set). A config that cannot run prints one line per
bad field on stderr and exits with status 2, before anything starts. On success it prints
``step s/n`` per step and, last, the summary as one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common.dotted import set_path

EXIT_CONFIG = 2  # a config that cannot run (as `aero train`)


def _set(data: dict, dotted: str) -> None:
    key, _, raw = dotted.partition("=")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    set_path(data, key.strip(), value)


def _one_line(text: object) -> str:
    """Control characters (a newline in a user's key or value) escaped: one line per field."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def _fail(lines: list[tuple[str, str]]) -> int:
    print("invalid run config (nothing was run):", file=sys.stderr)
    for loc, msg in lines:
        print(f"  {_one_line(loc)}: {_one_line(msg)}", file=sys.stderr)
    return EXIT_CONFIG


def load_config(path: Path, sets: list[str]) -> dict:
    """The config file's JSON object with the ``--set`` overrides; engine forced to 'verl'.
    Raises ValueError (one line) for a file that is not a JSON object or a bad ``--set``."""
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object (the run config)")
    for s in sets:
        if "=" not in s or not s.partition("=")[0].strip():
            raise ValueError(f"--set expects key=value (e.g. aero.k=2); got {s!r}")
        _set(data, s)
    data["engine"] = "verl"
    if data.get("model_path") and "preset" not in data:  # a model directory replaces the default preset
        data["preset"] = None
    return data


def run(argv: list[str] | None = None) -> tuple[int, dict | None]:
    """(exit status, summary or None)."""
    from trainer.spec.config import ConfigError, parse_run_config
    from trainer.spec.operator_policy import RunPolicy

    ap = argparse.ArgumentParser(prog="python -m trainer.verl", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, required=True, help="JSON run config (engine is forced to 'verl')")
    ap.add_argument("--out", type=Path, required=True, help="run directory (shared by every node)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="override key=value (dotted, JSON values)")
    a = ap.parse_args(argv)
    try:
        data = load_config(a.config, a.sets)
    except ValueError as e:
        return _fail([("config", str(e))]), None
    try:
        # the operator runs this command: the policy is the environment's (AERO_DATA_ROOTS unset: any path)
        cfg = parse_run_config(data, RunPolicy.from_env())
    except ConfigError as e:
        return _fail(e.issues), None
    except ValueError as e:  # a malformed AERO_* setting: the operator's, not the config's
        return _fail([("environment", str(e).replace("\n", " "))]), None

    from trainer.platform.sinks import JsonlSink
    from trainer.verl import run_verl

    try:
        summary = run_verl(cfg, a.out, JsonlSink(a.out),
                           progress=lambda s, n, m: print(f"step {s}/{n}", flush=True))
    except ConfigError as e:  # the launcher's own checks (model_path is a local model directory)
        return _fail(e.issues), None
    print(json.dumps({k: v for k, v in summary.items() if k != "final_eval"}, default=str), flush=True)
    return 0, summary


def main(argv: list[str] | None = None) -> dict:
    """Run and return the summary; exit with status 2 on a config that cannot run."""
    code, summary = run(argv)
    if code:
        raise SystemExit(code)
    return summary


if __name__ == "__main__":
    main()
