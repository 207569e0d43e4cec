#!/usr/bin/env python3
"""The embedded update alone at a shipped shape and the paper's per-step batch: peak device
memory, seconds, tokens per second and MFU of one ``Updater.step``, with the memory plan's
budget. No generation: the rows are synthetic (random token ids, response lengths geometric
with mean ~600 and cut at max_new_tokens, prompts 100-200 tokens, as the strata task's), so the
probe measures what the update of a step that size costs, and nothing about learning.

    python scripts/update_probe.py --shape qwen2.5-1.5b --prompts 128 --json out.json   # one GPU
    python scripts/update_probe.py --shape tiny-151k --prompts 2 --n 4 --max-new 64     # anywhere

``--packed on|off|auto`` is the run's ``packed_update``: the same rows through the packed update
and the padded one, back to back (docs/engines.md "Packed update"). ``--preset tiny`` probes the
shipped tiny policy instead of a shape, with rows at its task's lengths given by
``--prompt-tokens`` and ``--mean-new``::

    for p in off on; do python scripts/update_probe.py --shape tiny-151k --prompts 8 --n 8 --max-new 256 \
        --micro-batch-tokens 4096 --packed $p --json /tmp/update_151k_$p.json; done
    for p in off on; do python scripts/update_probe.py --preset tiny --prompts 64 --n 16 --max-new 12 \
        --mean-new 4 --prompt-tokens 5 9 --checkpointing off --packed $p --json /tmp/update_tiny_$p.json; done

Prints one JSON object (also written to --json): the plan, rows, tokens, seconds, peak memory
(torch.cuda.max_memory_allocated on CUDA; the process's peak RSS on CPU) and MFU against the
device's peak bf16 FLOP/s (trainer/bench/device.py), all of the first call. ``--calls 2`` runs the
same update again (weights moved by the first): ``calls`` holds each call's seconds and, on CUDA,
the caching allocator's counters over it (scripts/warmup_probe.py), ``warmup_s`` the first call's
seconds minus the second's (None with one call).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "scripts"))  # warmup_probe's allocator counters

import numpy as np  # noqa: E402
import torch  # noqa: E402

from trainer.bench.device import Meter, peak_flops  # noqa: E402
from trainer.spec.config import parse_run_config  # noqa: E402
from trainer.embedded.memory_plan import plan_memory  # noqa: E402
from trainer.embedded.presets import load_model, resolve_device  # noqa: E402
from trainer.embedded.update import Updater  # noqa: E402
from trainer.core.flops import train_flops  # noqa: E402
from trainer.rollout.base import Rollout  # noqa: E402
from warmup_probe import alloc_delta, alloc_stats  # noqa: E402


def synthetic_rows(prompts: int, n: int, max_new: int, vocab: int, seed: int = 0, prompt_tokens=(100, 200),
                   mean_new: float = 600) -> list[Rollout]:
    rng = np.random.default_rng(seed)
    top = vocab - 300 if vocab > 600 else vocab  # a Qwen vocabulary's special tokens sit at its top
    rows = []
    for p in range(prompts):
        prompt = rng.integers(0, top, size=int(rng.integers(prompt_tokens[0], prompt_tokens[1] + 1))).tolist()
        for _ in range(n):
            q = int(min(rng.geometric(1 / mean_new), max_new))
            rows.append(Rollout(p, prompt, rng.integers(0, top, size=q).tolist(), [-12.0] * q, q < max_new))
    return rows


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen2.5-1.5b")
    ap.add_argument("--preset", default=None, help="a shipped preset (tiny) instead of --shape")
    ap.add_argument("--prompt-tokens", type=int, nargs=2, default=(100, 200), metavar=("MIN", "MAX"))
    ap.add_argument("--mean-new", type=float, default=600, help="mean response length (geometric, cut at --max-new)")
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--max-new", type=int, default=1536)
    ap.add_argument("--checkpointing", choices=("on", "off"), default="on")
    ap.add_argument("--micro-batch-tokens", type=int, default=0)
    ap.add_argument("--packed", choices=("auto", "on", "off"), default="auto",
                    help="packed_update: on = micro-batches packed into one row, off/auto = padded (the embedded default)")
    ap.add_argument("--calls", type=int, default=1, help="update calls on the same rows (2: first vs second)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    if a.calls < 1:
        ap.error("--calls must be >= 1")
    model_fields = {"preset": a.preset, "max_prompt_tokens": a.prompt_tokens[1]} if a.preset else \
        {"preset": None, "model_shape": a.shape, "task": "strata", "max_prompt_tokens": 1024}
    cfg = parse_run_config({**model_fields, "method": "grpo",
                            "batch_prompts": a.prompts, "n_total": a.n, "max_new_tokens": a.max_new,
                            "gradient_checkpointing": a.checkpointing == "on",
                            "micro_batch_tokens": a.micro_batch_tokens, "packed_update": a.packed,
                            "optim": {"lr": 5e-6}})
    device, dtype = resolve_device(cfg)
    model, _ = load_model(cfg, device, dtype)  # a shape's random weights are seeded by cfg.seed (0)
    plan = plan_memory(cfg, model, device, dtype)
    updater = Updater.from_config(cfg, model, pad_id=0, device=device, micro_batch_tokens=plan.micro_batch_tokens)
    rows = synthetic_rows(a.prompts, a.n, a.max_new, model.config.vocab_size, prompt_tokens=a.prompt_tokens,
                          mean_new=a.mean_new)
    adv = torch.randn(len(rows), generator=torch.Generator().manual_seed(0))
    autocast = torch.autocast("cuda", dtype=dtype) if device.type == "cuda" and dtype != torch.float32 else None
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    # The peak during the update alone (CUDA: max allocated; CPU: VmHWM reset to the current RSS first).
    # Not ru_maxrss: that is the process's lifetime peak, which building the model may already have set.
    meter = Meter(device)
    start, reset = meter.in_use(), meter.reset()
    calls: list[dict] = []
    stats: dict[str, float] = {}
    peak_mb: float | None = None
    for i in range(a.calls):
        before = alloc_stats(device)
        t0 = time.perf_counter()
        with autocast if autocast is not None else torch.enable_grad():
            step_stats = updater.step(rows, adv)
        if cuda:
            torch.cuda.synchronize()
        calls.append({"seconds": time.perf_counter() - t0, "allocator": alloc_delta(before, alloc_stats(device))})
        if i == 0:
            stats, peak_mb = step_stats, meter.peak() if reset else None
    secs: float = calls[0]["seconds"]
    mc = model.config
    n_params = sum(p.numel() for p in model.parameters())
    flops = train_flops(n_params, mc.num_hidden_layers, mc.hidden_size, [len(r.prompt_ids) + r.length for r in rows])
    peak = peak_flops(device)
    out = {"shape": a.preset or a.shape, "device": torch.cuda.get_device_name(device) if cuda else "cpu", "torch": torch.__version__,
           "checkpointing": a.checkpointing, "packed_update": a.packed, "packed": updater.packing(),
           "plan": plan.as_dict(), "rows": len(rows),
           "tokens": sum(len(r.prompt_ids) + r.length for r in rows), "response_tokens": sum(r.length for r in rows),
           "seconds": secs, "tokens_per_s": sum(len(r.prompt_ids) + r.length for r in rows) / secs,
           "flops": flops, "mfu": flops / secs / peak if peak else None,
           "peak_memory_mb": peak_mb / 2**20 if peak_mb is not None else None,  # weights and optimizer state included
           "update_memory_mb": (peak_mb - start) / 2**20 if peak_mb is not None and start is not None else None,
           "loss": stats["loss/total"], "calls": calls,
           "warmup_s": calls[0]["seconds"] - calls[1]["seconds"] if len(calls) > 1 else None}
    print(json.dumps(out))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
