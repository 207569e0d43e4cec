#!/usr/bin/env python3
"""GPU check: the embedded engine on CUDA in bf16 with a ~34M-parameter policy, GRPO vs AERO.

    python scripts/gpu_check.py                 # on a CUDA machine (default sizes, ~2-4 min)
    python scripts/gpu_check.py --tiny          # anywhere, seconds: a smoke test of the script
    python scripts/gpu_check.py --json out.json # also write the numbers as JSON

Runs from the source tree with only torch and transformers installed (no pip install, no
network): the repository root is put on sys.path, and when pydantic is missing the run config
is a plain namespace with RunConfig's paper defaults (trainer/spec/config.py) instead of RunConfig.

What it does:
1. builds a Qwen2-shaped policy (hidden 512, 8 layers, 8 heads, intermediate 2048, char
   vocabulary: 33.6M parameters) and warm-starts it with a short supervised run on the
   arithmetic task (as `aero pretrain`), so RL prompts fall in every AERO stratum;
2. from that same start, runs a few steps of GRPO, AERO (the paper's sequential rescue rounds)
   and AERO with rounds_per_call=4 (speculative rounds, one engine call per 4 rounds), with the
   platform's own collectors (trainer/embedded/collect.py) and update (trainer/embedded/update.py), weights in
   fp32 and forwards under bf16 autocast (what a run with dtype=auto gets on CUDA);
3. prints per step: time split rollout / reward / train, generated and trained tokens and
   tokens/s; then the mean step time per method (first step excluded: CUDA warm-up) and the
   AERO/GRPO step-time ratio.

Not yet run on a GPU (the session that wrote it had none); tested on CPU with --tiny.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

try:
    import pydantic  # noqa: F401
except ImportError:  # trainer.embedded.collect only names RunConfig in annotations: a stub module is enough
    sys.modules["trainer.spec.config"] = types.SimpleNamespace(RunConfig=object)  # type: ignore[assignment]

import numpy as np  # noqa: E402
import torch  # noqa: E402

from trainer.embedded.collect import StepContext, collect  # noqa: E402
from trainer.embedded.model import build_model, count_parameters, tiny_qwen2_config  # noqa: E402
from trainer.embedded.pretrain import cosine_lr, measure_strata, sft_batch  # noqa: E402
from trainer.rollout.base import SamplingParams  # noqa: E402
from trainer.rollout.embedded import HFSampler  # noqa: E402
from trainer.tasks.arithmetic import WARM_START_WEIGHTS, ArithmeticTask  # noqa: E402
from trainer.core.losses import Aggregation  # noqa: E402
from trainer.embedded.update import Updater, UpdateSettings, warmup_constant_lr  # noqa: E402

SHAPES = {
    "default": dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=8,
                    intermediate_size=2048),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                 intermediate_size=128),
}


def run_config(method: str, *, batch_prompts: int, n_total: int, n_explore: int, rounds_per_call: int = 1,
               seed: int = 0):
    """The run config the collectors read: RunConfig when pydantic is there, else a namespace
    with the same paper defaults (RunConfig: aero.*, std_unbiased, adv_estimator...)."""
    fields = dict(method=method, batch_prompts=batch_prompts, n_total=n_total, seed=seed, max_new_tokens=12)
    if method.startswith("aero"):  # only AERO's configs carry its section
        fields["aero"] = dict(n_explore=n_explore, n_max=2 * n_total, rounds_per_call=rounds_per_call)
    try:
        from trainer.spec.config import parse_run_config

        return parse_run_config(fields)
    except (ImportError, AttributeError):
        aero = types.SimpleNamespace(n_explore=n_explore, n_max=2 * n_total, delta_n=2, k_max=10, tau=0.5, S=0, k=1.0,
                                     alpha0=1.0, beta0=1.0, zero_variance_keep=4, negative_selection="random",
                                     rescue_negative="first", zero_variance_selection="first",
                                     budget_split="prompt-order", rounds_per_call=rounds_per_call)
        return types.SimpleNamespace(method=method, batch_prompts=batch_prompts, n_total=n_total, seed=seed,
                                     max_new_tokens=12, aero=aero, std_unbiased=True,
                                     rollout=types.SimpleNamespace(sampler="hf", decode="dynamic", rng="stream", schedule="calls"),
                                     adv_estimator="grpo", verifier_timeout_s=5.0)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def warm_start(model, task, device, steps: int, batch: int, autocast) -> float:
    """Supervised warm start on answers (trainer/embedded/pretrain.py's recipe, on the device)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cosine_lr(s, steps, warmup=min(20, steps)))
    model.train()
    loss = torch.zeros(())
    for step in range(steps):
        b = {k: v.to(device) for k, v in sft_batch(task.sft_examples(batch, 0, WARM_START_WEIGHTS, start=step * batch),
                                                   task.tokenizer.pad_id).items()}
        with autocast():
            loss = model(**b).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    return float(loss.detach())


def run_method(name: str, cfg, base_model, task, device, steps: int, autocast, lr: float) -> list[dict]:
    """``steps`` RL steps of ``cfg.method`` from a copy of ``base_model``; per-step timings."""
    model = copy.deepcopy(base_model)
    engine = HFSampler(model, eos_id=task.tokenizer.eos_id, pad_id=task.tokenizer.pad_id, device=device,
                       dtype=torch.bfloat16 if device.type == "cuda" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_constant_lr(s, 0))
    # one epoch, one mini-batch, no reference model (kl_coef 0), mini-batches in order (no shuffle RNG)
    updater = Updater(model, opt, sched, UpdateSettings(
        pad_id=task.tokenizer.pad_id, temperature=1.0, eps_low=0.2, eps_high=0.2,
        agg=Aggregation("seq-mean-token-mean", max_len=12), entropy_coef=1e-3, kl_coef=0.0, grad_clip=1.0,
        device=device))
    ctx = StepContext(cfg=cfg, task=task, sampler=engine, sampling=SamplingParams(1.0, 1.0, 12),
                      gen=torch.Generator(device=device).manual_seed(cfg.seed), rng=np.random.default_rng(cfg.seed))
    rows, data_pos = [], 0
    for step in range(1, steps + 1):
        sync(device)
        t0 = time.perf_counter()
        c = collect(ctx, data_pos)
        data_pos += c.prompts_used
        sync(device)
        t1 = time.perf_counter()
        stats = {}
        if c.train:
            with autocast():
                stats = updater.step(c.train, c.advantages)
        engine.sync_weights(model)
        sync(device)
        t2 = time.perf_counter()
        gen_tok = sum(r.length for r in c.generated)
        tr_tok = sum(len(r.prompt_ids) + r.length for r in c.train)
        row = {"method": name, "step": step, "step_s": t2 - t0, "rollout_s": c.time_rollout, "reward_s": c.time_reward,
               "train_s": t2 - t1, "collect_other_s": (t1 - t0) - c.time_rollout - c.time_reward,
               "gen_calls": c.gen_calls, "generated": len(c.generated), "trained": len(c.train),
               "gen_tokens": gen_tok, "train_tokens": tr_tok,
               "gen_tok_per_s": gen_tok / c.time_rollout if c.time_rollout > 0 else float("nan"),
               "train_tok_per_s": tr_tok / (t2 - t1) if t2 > t1 else float("nan"),
               "zero_acc": c.stats.get("zero_acc/after_explore", float("nan")),
               "rescued": c.stats.get("rescue/rescued", 0.0), "grad_norm": stats.get("train/grad_norm", float("nan"))}
        rows.append(row)
        print(f"{name:9s} step {step}: step {row['step_s']:.3f}s = rollout {row['rollout_s']:.3f} + reward "
              f"{row['reward_s']:.3f} + other {row['collect_other_s']:.3f} + train {row['train_s']:.3f} | calls "
              f"{row['gen_calls']} gen {row['generated']} ({gen_tok} tok, {row['gen_tok_per_s']:.0f} tok/s) trained "
              f"{row['trained']} ({tr_tok} tok, {row['train_tok_per_s']:.0f} tok/s) | zero-acc {row['zero_acc']:.2f}",
              flush=True)
    return rows


def summarize(rows: list[dict], skip_first: bool) -> dict:
    keep = [r for r in rows if not (skip_first and r["step"] == 1)] or rows
    mean = lambda k: float(np.mean([r[k] for r in keep]))  # noqa: E731
    return {k: mean(k) for k in ("step_s", "rollout_s", "reward_s", "train_s", "gen_tokens", "train_tokens",
                                 "gen_tok_per_s", "train_tok_per_s", "generated", "trained", "gen_calls")}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", action="store_true", help="tiny sizes: a CPU smoke test of the script")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=None, help="RL steps per method (default 6; tiny 2)")
    ap.add_argument("--prompts", type=int, default=None, help="prompts per step (default 128; tiny 4)")
    ap.add_argument("--n-total", type=int, default=None, help="rollout budget per prompt (default 16; tiny 4)")
    ap.add_argument("--sft-steps", type=int, default=None, help="warm-start steps (default 300; tiny 3)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    a = ap.parse_args(argv)
    tiny = a.tiny
    steps = a.steps or (2 if tiny else 6)
    P = a.prompts or (4 if tiny else 128)
    n_total = a.n_total or (4 if tiny else 16)
    sft_steps = a.sft_steps if a.sft_steps is not None else (3 if tiny else 300)
    device = torch.device("cuda" if a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available()) else "cpu")
    autocast = ((lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda"
                else (lambda: torch.autocast("cpu", enabled=False)))
    torch.manual_seed(0)
    task = ArithmeticTask()
    tok = task.tokenizer
    config = tiny_qwen2_config(tok.vocab_size, tok.bos_id, tok.eos_id, tok.pad_id,
                               **SHAPES["tiny" if tiny else "default"])
    model = build_model(config, seed=0).to(device)
    n_params = count_parameters(model)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(f"device {device} ({gpu}); torch {torch.__version__}; policy {n_params / 1e6:.1f}M parameters; "
          f"P={P} n_total={n_total} steps={steps}", flush=True)
    t = time.perf_counter()
    loss = warm_start(model, task, device, sft_steps, 16 if tiny else 256, autocast)
    t_sft = time.perf_counter() - t
    model.eval()
    with autocast():
        strata = measure_strata(model, task, n=8, count=8 if tiny else 256)
    print(f"warm start: {sft_steps} steps in {t_sft:.1f}s, loss {loss:.3f}; strata at n=8 {strata}", flush=True)
    lr = 1e-4
    methods = {"grpo": run_config("grpo", batch_prompts=P, n_total=n_total, n_explore=n_total // 2),
               "aero": run_config("aero", batch_prompts=P, n_total=n_total, n_explore=n_total // 2),
               "aero-r4": run_config("aero", batch_prompts=P, n_total=n_total, n_explore=n_total // 2, rounds_per_call=4)}
    rows = []
    for name, cfg in methods.items():
        rows += run_method(name, cfg, model, task, device, steps, autocast, lr)
    summary = {name: summarize([r for r in rows if r["method"] == name], skip_first=steps > 1) for name in methods}
    ratio = {name: summary[name]["step_s"] / summary["grpo"]["step_s"] for name in ("aero", "aero-r4")}
    print("\nmean per step (first step excluded):")
    for name, s in summary.items():
        print(f"  {name:9s} step {s['step_s']:.3f}s  rollout {s['rollout_s']:.3f}s  reward {s['reward_s']:.3f}s  "
              f"train {s['train_s']:.3f}s  calls {s['gen_calls']:.1f}  generated {s['gen_tokens']:.0f} tok "
              f"({s['gen_tok_per_s']:.0f}/s)  trained {s['train_tokens']:.0f} tok ({s['train_tok_per_s']:.0f}/s)")
    print(f"AERO/GRPO step-time ratio: {ratio['aero']:.2f} (sequential rounds), {ratio['aero-r4']:.2f} "
          f"(rounds_per_call=4)")
    result = {"device": str(device), "device_name": gpu, "torch": torch.__version__, "n_params": n_params,
              "prompts": P, "n_total": n_total, "steps": steps, "sft_steps": sft_steps, "strata": strata,
              "summary": summary, "ratio_aero_grpo": ratio, "rows": rows}
    if a.json:
        a.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
