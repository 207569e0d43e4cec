"""A checkpoint's save with and without the zip's CRC-32s, side by side on one state.

    python benchmarks/checkpoint_save.py --reps 3                  # smollm2-135m's state if installed
    python benchmarks/checkpoint_save.py --reps 3 --synthetic-mb 1600

The state is what an embedded run saves: the model's weights and AdamW's two moments after one
step (3x the weights), from the installed smollm2-135m (134.5M parameters, ~1.6 GB in fp32), or
random tensors of ``--synthetic-mb`` when it is not installed. Each rep saves once with CRCs and
once without (alternating, so neither always writes to a warm page cache first); at the end both
files are loaded back and must hold the same entries (torch.load never checks the CRCs).
Nothing else may run on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from trainer.embedded.checkpoint import without_crc32  # noqa: E402


def model_state() -> tuple[str, dict]:
    """The real model's weights and AdamW's moments after one step, as a run's checkpoint holds them."""
    from transformers import AutoModelForCausalLM

    from trainer.models.catalog import installed, model_dir

    name = "smollm2-135m"
    if installed(name) is None:
        raise LookupError(name)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir(name)), dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    for p in model.parameters():
        p.grad = torch.full_like(p, 1e-3)
    opt.step()
    return name, {"model": model.state_dict(), "optimizer": opt.state_dict()}


def synthetic_state(mb: int) -> tuple[str, dict]:
    g = torch.Generator().manual_seed(0)  # tensors of 2^20 floats, 4 MB each
    return f"synthetic {mb} MB", {f"t{i}": torch.randn(1 << 20, generator=g) for i in range(mb // 4)}


def timed_save(state: dict, path: Path, crc: bool) -> float:
    ctx = contextlib.nullcontext() if crc else without_crc32()  # the context the checkpoint's save uses
    t0 = time.perf_counter()
    with ctx:
        torch.save(state, path)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--synthetic-mb", type=int, default=0, help="random tensors of this size instead of the model")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    try:
        name, state = synthetic_state(args.synthetic_mb) if args.synthetic_mb else model_state()
    except LookupError:
        name, state = synthetic_state(1600)
    size: dict[bool, int] = {}
    times: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as d:
        for rep in range(args.reps):
            for crc in ((True, False) if rep % 2 == 0 else (False, True)):
                path = Path(d) / f"crc{int(crc)}.pt"
                times[crc].append(timed_save(state, path, crc))
                size[crc] = path.stat().st_size
        a, b = (torch.load(Path(d) / f"crc{c}.pt", weights_only=False) for c in (1, 0))
        assert a.keys() == b.keys()
    out = {"state": name, "bytes": size[True], "reps": args.reps,
           "with_crc_s": [round(t, 3) for t in times[True]], "without_crc_s": [round(t, 3) for t in times[False]],
           "median_ratio": round(statistics.median(times[True]) / statistics.median(times[False]), 2)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
