"""Accounting-only benchmark: what GRPO, DAPO and AERO generate, train and are charged per step
on the scripted strata task, with no model and no GPU.

REAL: the platform's registered method steps (``trainer.methods.spec.get_step(name)``) with the
platform's defaults (``parse_run_config``: AERO's n_explore 8, n_max 32, K_max 10,
rounds_per_call; DAPO's max_gen_rounds 1, ...), so their allocation and curation are the code
a run executes; the FLOPs formula (trainer/core/flops.py), charged as trainer/embedded/collect.py's
``step_metrics`` charges it (every generated row's prompt + response for rollouts, the trained
rows' for the update, extra_forwards 0) at the shape's n_params / n_layers / d_model; the
strata task's prompt stream (per-prompt success probability ``meta["p"]`` from its mixture,
prompt lengths 100-200), the same problems start..start+P-1 for every method, the data
position advancing by ``prompts_used`` as in the training loop, the curation RNG seeded by the
run seed as in the loop.

SCRIPTED: rewards are Bernoulli(p) from a numpy RNG seeded per (seed, step), not the task's
hash of the response (there are no tokens); response lengths are geometric with the task's
mean (600) cut at max_new_tokens, drawn from the same RNG.

MODELLED, NOT MEASURED: the step time. Each generate call is taken to decode until its longest
row (the embedded engine may split a call into chunks; ignored here), at --decode-ms-per-step
per decode step, and the update trains prompt + response tokens at --train-tokens-per-s. The
defaults come from one H200 measurement at the 1.5B shape (decode step 29 ms; update with
activation checkpointing at 32 prompts: 359,459 tokens in 24.03 s).

    .venv/bin/python benchmarks/strata_accounting.py --json strata_accounting.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common.metric_keys as mk  # noqa: E402
from trainer.spec.config import parse_run_config  # noqa: E402
from trainer.core.stats import mean_ci  # noqa: E402
from trainer.embedded.shapes import shape_config, shape_parameters  # noqa: E402
from trainer.core.flops import rollout_flops, train_flops  # noqa: E402
from trainer.methods.sampler import Samples  # noqa: E402
from trainer.methods.spec import baseline_method, get_step  # noqa: E402
from trainer.tasks.scripted import MEAN_RESPONSE_TOKENS, StrataTask  # noqa: E402

METHODS = ("grpo", "dapo", "aero")
N_TOTAL, MAX_NEW, MAX_PROMPT = 16, 1536, 1024
KEYS = ("generated_rows", "generated_tokens", "trained_rows", "trained_tokens", "rollout_flops", "train_flops",
        "total_flops", "gen_calls", "zero_acc_explore", "zero_acc_rescue", "model_decode_s", "model_train_s",
        "model_step_s")
RATIO_KEYS = ("train_flops", "total_flops", "trained_tokens", "model_step_s")


@dataclass(frozen=True)
class Costs:
    """Per-token costs of the modelled step time (module docstring)."""

    decode_ms_per_step: float = 29.0
    train_tokens_per_s: float = 14960.0


class Stream:
    """The strata task's training stream of one seed: per problem, its p and prompt length (cached)."""

    def __init__(self, task: StrataTask, seed: int):
        self.task, self.seed, self.cache = task, seed, {}

    def batch(self, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        for i in range(start, start + count):
            if i not in self.cache:
                pr = self.task.problem(i, self.seed)
                self.cache[i] = (pr.meta["p"], len(self.task.encode_prompt(pr)))
        p, plen = zip(*(self.cache[i] for i in range(start, start + count)))
        return np.array(p, dtype=np.float64), np.array(plen, dtype=np.int64)


class ScriptedSampler:
    """A Sampler (trainer/methods/sampler.py) with scripted rewards and lengths; it records each
    ``sample()`` call's response lengths and every row's prompt + response tokens."""

    def __init__(self, stream: Stream, data_pos: int, P: int, max_new_tokens: int, rng: np.random.Generator):
        self.stream, self.pos, self.P, self.cap, self.rng = stream, data_pos, P, max_new_tokens, rng
        self.state: dict = {}
        self.p, self.plen = np.zeros(0), np.zeros(0, dtype=np.int64)
        self.calls: list[np.ndarray] = []  # response lengths of each sample() call
        self.seq: list[np.ndarray] = []  # prompt + response tokens of each call's rows
        self.rows = 0

    def next_prompts(self) -> int:
        self.p, self.plen = self.stream.batch(self.pos, self.P)
        self.pos += self.P
        return self.P

    def prompt_keys(self) -> list[str | None]:
        return [None] * len(self.p)  # strata problems carry no "where"

    def sample(self, counts, round_: int) -> Samples:
        prompt = np.repeat(np.arange(len(counts)), np.asarray(counts, dtype=np.int64))
        reward = (self.rng.random(len(prompt)) < self.p[prompt]).astype(np.float64)
        length = np.minimum(self.rng.geometric(1.0 / MEAN_RESPONSE_TOKENS, len(prompt)), self.cap)
        tokens = self.plen[prompt] + length
        s = Samples.build(self.rows, prompt, reward, length, tokens)
        self.rows += len(prompt)
        self.calls.append(length)
        self.seq.append(tokens)
        return s


def run_seed(cfg, stream: Stream, dims: tuple[int, int, int], steps: int, costs: Costs) -> list[dict[str, float]]:
    """``steps`` steps of ``cfg.method`` from data position 0; per step, the accounting in KEYS."""
    step_fn, curation, pos, out = get_step(cfg.method), np.random.default_rng(cfg.seed), 0, []
    for t in range(steps):
        sampler = ScriptedSampler(stream, pos, cfg.batch_prompts, cfg.max_new_tokens, np.random.default_rng([cfg.seed, t]))
        res = step_fn(cfg, sampler, curation)
        pos += res.prompts_used
        gen = np.concatenate(sampler.seq)  # prompt + response tokens by global row id
        trained = gen[res.rows]
        f_roll, f_train = rollout_flops(*dims, gen.tolist()), train_flops(*dims, trained.tolist(), 0)
        decode_s = sum(int(c.max(initial=0)) for c in sampler.calls) * costs.decode_ms_per_step / 1e3
        train_s = float(trained.sum()) / costs.train_tokens_per_s
        out.append({"generated_rows": float(len(gen)), "generated_tokens": float(sum(c.sum() for c in sampler.calls)),
                    "trained_rows": float(len(trained)), "trained_tokens": float(trained.sum()),
                    "rollout_flops": f_roll, "train_flops": f_train, "total_flops": f_roll + f_train,
                    "gen_calls": float(len(sampler.calls)),
                    "zero_acc_explore": float(res.stats.get(mk.ZERO_ACC_AFTER_EXPLORE, np.nan)),
                    "zero_acc_rescue": float(res.stats.get(mk.ZERO_ACC_AFTER_RESCUE, np.nan)),
                    "model_decode_s": decode_s, "model_train_s": train_s, "model_step_s": decode_s + train_s})
    return out


def run(shape: str = "qwen2.5-1.5b", methods=METHODS, seeds=(0, 1, 2), steps: int = 20, prompts: int = 128,
        costs: Costs = Costs()) -> dict:
    """Every method x seed; per method the per-seed and overall means per step, and each
    method's ratio to the baseline per seed (mean over steps / baseline's) with a 95% t interval."""
    config = shape_config(shape)
    dims = (shape_parameters(shape), config.num_hidden_layers, config.hidden_size)
    task = StrataTask(config.vocab_size, MAX_PROMPT)
    result: dict = {"config": {"shape": shape, "n_params": dims[0], "n_layers": dims[1], "d_model": dims[2],
                               "seeds": list(seeds), "steps": steps, "prompts": prompts, "n_total": N_TOTAL,
                               "max_new_tokens": MAX_NEW, "costs": asdict(costs)}, "methods": {}, "ratios": {}}
    for seed in seeds:
        stream = Stream(task, seed)  # one stream per seed, shared by every method
        for m in methods:
            cfg = parse_run_config({"preset": None, "model_shape": shape, "task": "strata", "method": m, "seed": seed,
                                    "batch_prompts": prompts, "n_total": N_TOTAL, "max_new_tokens": MAX_NEW,
                                    "max_prompt_tokens": MAX_PROMPT})
            per_step = run_seed(cfg, stream, dims, steps, costs)
            entry = result["methods"].setdefault(m, {"per_seed": {}})
            entry["per_seed"][str(seed)] = {"mean": {k: float(np.mean([s[k] for s in per_step])) for k in KEYS},
                                            "steps": per_step}
    for entry in result["methods"].values():
        entry["mean"] = {k: float(np.mean([v["mean"][k] for v in entry["per_seed"].values()])) for k in KEYS}
    base = baseline_method()
    means = {m: {s: e["per_seed"][str(s)]["mean"] for s in seeds} for m, e in result["methods"].items()}
    for m in methods:
        if m != base and base in means:
            result["ratios"][f"{m}/{base}"] = {k: mean_ci([means[m][s][k] / means[base][s][k] for s in seeds])
                                               for k in RATIO_KEYS}
    return result


def _ci(c: dict) -> str:
    values = ", ".join(f"{v:.3f}" for v in c["values"])
    band = f" [{c['lo']:.3f}, {c['hi']:.3f}]" if c["lo"] is not None else ""
    return f"{values}; **{c['mean']:.3f}**{band}"


def markdown(result: dict) -> str:
    cols = [("generated_rows", "gen rows", 0, 1), ("generated_tokens", "gen resp tok", 0, 1),
            ("trained_rows", "trained rows", 0, 1), ("trained_tokens", "trained tok (prompt+resp)", 0, 1),
            ("rollout_flops", "rollout PFLOP", 2, 1e15), ("train_flops", "train PFLOP", 2, 1e15),
            ("total_flops", "total PFLOP", 2, 1e15), ("gen_calls", "gen calls", 2, 1),
            ("zero_acc_explore", "zero-acc explore", 3, 1), ("zero_acc_rescue", "zero-acc rescue", 3, 1),
            ("model_step_s", "MODELLED step s", 1, 1)]
    c = result["config"]
    lines = [f"Shape {c['shape']}, {c['prompts']} prompts x {c['steps']} steps x seeds {c['seeds']}; mean per step "
             "(rewards and lengths scripted; step time MODELLED, not measured)", "",
             "| method | " + " | ".join(h for _, h, _, _ in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for m, e in result["methods"].items():
        lines.append(f"| {m} | " + " | ".join(f"{e['mean'][k] / u:,.{d}f}" for k, _, d, u in cols) + " |")
    if result["ratios"]:
        names = list(result["ratios"])
        lines += ["", "| ratio: per seed; **mean** [95% t CI] | " + " | ".join(names) + " |",
                  "|---" * (len(names) + 1) + "|"]
        for k in RATIO_KEYS:
            label = "MODELLED step time" if k == "model_step_s" else k.replace("_", " ")
            lines.append(f"| {label} | " + " | ".join(_ci(result["ratios"][n][k]) for n in names) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="qwen2.5-1.5b")
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--decode-ms-per-step", type=float, default=Costs.decode_ms_per_step)
    ap.add_argument("--train-tokens-per-s", type=float, default=Costs.train_tokens_per_s)
    ap.add_argument("--json", type=Path, help="write the full result (per step, per seed, ratios) here")
    a = ap.parse_args(argv)
    result = run(a.shape, tuple(a.methods), tuple(a.seeds), a.steps, a.prompts,
                 Costs(a.decode_ms_per_step, a.train_tokens_per_s))
    print(markdown(result))
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
