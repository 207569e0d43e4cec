#!/usr/bin/env python3
"""Decode speed of the embedded sampler at a shipped shape: transformers' SDPA attention against
the packed grouped-query path (trainer/rollout/attention.py), and the dynamic decode against the
static ones (trainer/rollout/static_decode.py), same rows, same generator.

    python scripts/decode_probe.py --shape qwen2.5-1.5b --rows 512 --tokens 256 --json out.json  # one GPU
    python scripts/decode_probe.py --shape qwen2.5-1.5b --rows 512 --tokens 256 \
        --decodes dynamic,static,graphs --json out.json                                           # + the decodes
    python scripts/decode_probe.py --shape tiny-151k --rows 4 --tokens 8                         # anywhere

Random weights never pick EOS, so every row decodes ``--tokens`` steps: the figure is
milliseconds per decode step at that many rows and a cache growing from ~150 to ~150 + tokens.
It also reports whether both paths sampled the same tokens and their largest log-prob
difference (bf16 rounding may flip a near-tie on CUDA). With ``--decodes``, each decode runs
back to back on the packed path, and ``decodes`` in the JSON holds its time, its speed-up over
the first decode listed and whether it sampled that decode's tokens. ``--eos-id`` picks a stop
token that random weights do sample (rows then finish at different steps, so the batch shrinks).

Each timed call follows a 2-row, 4-token call on the same engine, which pays the first launches
but not the allocator's growth at full size, so the first path timed may still carry some of it:
scripts/warmup_probe.py splits a first call's extra cost (the warm-up) from the steady state.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from trainer.embedded.shapes import build_shape_model  # noqa: E402
from trainer.rollout.attention import use_packed_gqa  # noqa: E402
from trainer.rollout.base import SamplingParams  # noqa: E402
from trainer.rollout.embedded import HFSampler  # noqa: E402


def timed_generate(engine: HFSampler, prompts, counts, sampling: SamplingParams, device,
                   keys: list[int] | None = None) -> tuple[list, dict]:
    """One warm-up call, then the timed call from seed 0 (or per-row ``keys``): (rollouts, seconds and rates)."""
    cuda = device.type == "cuda"
    engine.generate(prompts[:1], [2], SamplingParams(1.0, 1.0, 4), torch.Generator(device=device).manual_seed(1))
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    rollouts = engine.generate(prompts, counts, sampling, torch.Generator(device=device).manual_seed(0), keys=keys)
    if cuda:
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    steps = max(r.length for r in rollouts)
    return rollouts, {"seconds": secs, "decode_steps": steps, "ms_per_step": 1000 * secs / max(steps, 1),
                      "tokens_per_s": sum(r.length for r in rollouts) / secs}


def agreement(a: list, b: list) -> dict:
    """How far two runs of the same rows and generator sampled alike."""
    return {"same_tokens_frac": float(np.mean([x.response_ids == y.response_ids for x, y in zip(a, b)])),
            "max_logprob_diff_first_token": max(abs(x.logprobs[0] - y.logprobs[0]) for x, y in zip(a, b))}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen2.5-1.5b")
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--decodes", default="", help="comma-separated decodes to time back to back on the packed "
                    "path (dynamic, static, graphs); the first is the reference")
    ap.add_argument("--rngs", default="", help="comma-separated rollout.rng values (stream, per-row) to time back "
                    "to back on the first decode of --decodes (default dynamic): torch.multinomial's draws over the "
                    "vocabulary against one keyed uniform per token")
    ap.add_argument("--sync-every", type=int, default=None, help="the static decodes' steps between host reads")
    ap.add_argument("--eos-id", type=int, default=None, help="stop token (default: the last id, never sampled)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    model = build_shape_model(a.shape, device, torch.float32, seed=0)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 150_000, size=int(rng.integers(100, 201))).tolist() for _ in range(max(1, a.rows // 16))]
    counts = [a.rows // len(prompts)] * len(prompts)
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=a.tokens)
    eos = a.eos_id if a.eos_id is not None else model.config.vocab_size - 1
    out: dict = {"shape": a.shape, "device": torch.cuda.get_device_name() if cuda else "cpu", "rows": sum(counts),
                 "tokens": a.tokens, "torch": torch.__version__}

    def engine(decode: str = "dynamic") -> HFSampler:
        return HFSampler(model, eos_id=eos, pad_id=0, dtype=torch.bfloat16 if cuda else None, decode=decode,
                         sync_every=a.sync_every)

    results = {}
    for name in ("sdpa", "packed"):
        if name == "packed":
            out["packed_applied"] = use_packed_gqa(model)
        results[name], out[name] = timed_generate(engine(), prompts, counts, sampling, device)
    out.update(agreement(results["sdpa"], results["packed"]))
    out["speedup"] = out["sdpa"]["ms_per_step"] / out["packed"]["ms_per_step"]
    decodes = [d.strip() for d in a.decodes.split(",") if d.strip()]
    if decodes:
        out["decodes"], ref = {}, None
        for d in decodes:
            rollouts, timing = timed_generate(engine(d), prompts, counts, sampling, device)
            ref = ref or (rollouts, timing)
            out["decodes"][d] = {**timing, **agreement(ref[0], rollouts),
                                 "speedup": ref[1]["seconds"] / timing["seconds"]}
    rngs = [r.strip() for r in a.rngs.split(",") if r.strip()]
    if rngs:
        from trainer.rollout.keyed import row_key

        decode, out["rngs"] = (decodes or ["dynamic"])[0], []
        keys = [row_key(0, r // counts[0], r % counts[0]) for r in range(sum(counts))]
        for r in rngs:
            _, timing = timed_generate(engine(decode), prompts, counts, sampling, device,
                                       keys=keys if r == "per-row" else None)
            out["rngs"].append({"rng": r, "decode": decode, **timing})
    print(json.dumps(out))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
