"""Our GRPO step side by side with TRL's GRPOTrainer on identical work, then AERO (issue 14).

Identical work: the shipped tiny policy (trainer/assets/tiny, a transformers Qwen2 model)
loaded three times from the same weights (TRL's, our GRPO's, our AERO's), the arithmetic task's
training stream in order (TRL's dataset is that stream with ``shuffle_dataset=False``),
``--prompts`` x ``--n`` completions per step, the same ``--max-new-tokens``, temperature 1, top-p
1, fp32 on CPU, ``--threads`` torch threads, no KL (beta 0, so no reference model), one AdamW step
per batch at the same constant lr (no warmup), grad clip 1, entropy bonus 1e-3 and the
seq-mean-token-mean loss (TRL ``loss_type="grpo"``). Neither side runs an old-log-prob forward:
with one PPO epoch and one mini-batch both take the ratio against the sampled policy.

The steps are interleaved: TRL's own training loop runs, and a callback runs one step of our
GRPO and one of our AERO after each TRL step (a warm-up step of each is dropped), so all three
see the same machine state. The split per step:

* ours: ``generation`` = ``engine.generate``; ``scoring`` = decode + ``score_batch`` + advantages
  (+ AERO's stratify / plan / curate); ``forward`` = ``policy_logprobs`` inside
  ``Updater.step`` (timed by wrapping ``trainer.embedded.update.policy_logprobs``);
  ``backward_opt`` = the rest of ``Updater.step`` (collate, loss, backward, clip, AdamW).
* TRL: timers wrapped around the trainer instance's methods: ``generation`` = ``_generate``
  (tokenise, ``model.generate``, decode); ``scoring`` = ``_calculate_rewards`` plus the rest of
  ``_generate_and_score_completions`` (padding, advantages, logging); ``forward`` =
  ``_get_per_token_logps_and_entropies`` (the loss forward); ``backward_opt`` = the step's wall
  time (``on_step_begin`` to ``on_step_end``) minus the three above.

The floor: the step's model FLOPs (trainer/core/flops.py: rollout + training, from the real
sequence lengths) over this CPU's measured fp32 matmul rate with the same threads.

    /work/venv-bench/bin/python benchmarks/trl_compare.py --steps 20 --json trl_compare.json
    /work/venv-bench/bin/python benchmarks/trl_compare.py --steps 20 --trl-gradient-checkpointing  # TRL's default
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.spec.config import RunConfig  # noqa: E402
from trainer.core.advantages import grpo_advantage  # noqa: E402
from trainer.core.losses import Aggregation  # noqa: E402
from trainer.core.aero import CurationRules, aero_advantages, curate  # noqa: E402
from trainer.core.rescue import plan_rounds, replay, start_rescue  # noqa: E402
from trainer.core.stats import mean_ci, paired_ratios  # noqa: E402
from trainer.core.strata import Stratum, stratify  # noqa: E402
from trainer.core.flops import rollout_flops, train_flops  # noqa: E402
from trainer.methods.spec import get_method  # noqa: E402
from trainer.embedded.presets import PRESETS, load_setup  # noqa: E402
from trainer.rollout.base import SamplingParams  # noqa: E402
from trainer.tasks.verify import score_batch  # noqa: E402
import trainer.embedded.update as update_mod  # noqa: E402

PARTS = ("generation", "scoring", "forward", "backward_opt")


class Clock:
    """Seconds per named part, accumulated over one step."""

    def __init__(self):
        self.parts: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.parts[name] = self.parts.get(name, 0.0) + seconds

    def take(self) -> dict[str, float]:
        out, self.parts = self.parts, {}
        return out


def timed(fn, clock: Clock, name: str):
    """``fn`` with its wall time added to ``clock[name]`` on every call."""
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            clock.add(name, time.perf_counter() - t0)
    return wrapper


@contextmanager
def patched(obj, attr: str, clock: Clock, name: str):
    """Time ``obj.attr`` into ``clock[name]`` while the block runs (benchmark only)."""
    orig = getattr(obj, attr)
    setattr(obj, attr, timed(orig, clock, name))
    try:
        yield
    finally:
        setattr(obj, attr, orig)


def tiny_config(args, method: str = "grpo") -> RunConfig:
    """The run config both sides share (AERO: the config's defaults, n_explore 8 of n_total)."""
    rounds = getattr(args, "aero_rounds_per_call", None)
    return RunConfig(preset="tiny", task="arithmetic", method=method, batch_prompts=args.prompts, n_total=args.n,
                     max_new_tokens=args.max_new_tokens, device="cpu", dtype="float32", kl_coef=0.0,
                     entropy_coef=args.entropy_coef, seed=args.seed,
                     optim={"lr": args.lr, "warmup_steps": 0, "grad_clip": 1.0},
                     **({"aero": {"rounds_per_call": rounds}} if rounds is not None else {}))


class OursStep:
    """One training step of our embedded engine, built from the stable parts the loop uses
    (engine.generate, score_batch, the advantage functions, the embedded update's Updater)."""

    def __init__(self, cfg: RunConfig):
        self.cfg, self.setup = cfg, load_setup(cfg)
        opt = torch.optim.AdamW(self.setup.model.parameters(), lr=cfg.optim.lr, betas=(cfg.optim.beta1, cfg.optim.beta2),
                                weight_decay=cfg.optim.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)  # constant lr, no warmup
        settings = update_mod.UpdateSettings(
            pad_id=self.setup.task.tokenizer.pad_id, temperature=cfg.temperature, eps_low=cfg.clip_eps,
            eps_high=cfg.clip_eps, agg=Aggregation(cfg.effective_loss_agg, max_len=cfg.max_new_tokens),
            entropy_coef=cfg.entropy_coef, kl_coef=0.0, grad_clip=cfg.optim.grad_clip)
        # one epoch, one mini-batch, no reference model, mini-batches in order (no shuffle RNG)
        self.updater = update_mod.Updater(self.setup.model, opt, sched, settings)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)
        self.sampling = SamplingParams(cfg.temperature, cfg.top_p, cfg.max_new_tokens)
        self.clock, self.pos = Clock(), 0

    def sample(self, prompts, problems, n):
        """Generate, then decode + score; rewards set on the rollouts."""
        t0 = time.perf_counter()
        rollouts = self.setup.sampler.generate(prompts, n, self.sampling, self.gen)
        t1 = time.perf_counter()
        tok = self.setup.task.tokenizer
        rewards, _ = score_batch(self.setup.task, [tok.decode(r.response_ids) for r in rollouts],
                                 [problems[r.prompt_index] for r in rollouts], self.cfg.verifier_timeout_s)
        for r, rew in zip(rollouts, rewards):
            r.reward = float(rew)
        self.clock.add("generation", t1 - t0)
        self.clock.add("scoring", time.perf_counter() - t1)
        return rollouts

    def update(self, train, adv) -> None:
        t0 = time.perf_counter()
        with patched(update_mod, "policy_logprobs", self.clock, "forward"):
            self.updater.step(train, adv)
        self.clock.add("update", time.perf_counter() - t0)

    def step(self) -> dict:
        t0 = time.perf_counter()
        problems = self.setup.task.train_problems(self.pos, self.cfg.batch_prompts, self.cfg.seed)
        self.pos += self.cfg.batch_prompts
        prompts = [self.setup.task.encode_prompt(p) for p in problems]
        generated, train, adv = self.collect(prompts, problems)
        self.update(train, adv)
        return self.finish(time.perf_counter() - t0, generated, train)

    def collect(self, prompts, problems):
        rollouts = self.sample(prompts, problems, self.cfg.n_total)
        t0 = time.perf_counter()
        adv = grpo_advantage(torch.tensor([r.reward for r in rollouts]), torch.tensor([r.prompt_index for r in rollouts]),
                             eps=1e-6, unbiased=self.cfg.std_unbiased)
        self.clock.add("scoring", time.perf_counter() - t0)
        return rollouts, rollouts, adv

    def finish(self, total: float, generated, train) -> dict:
        p = self.clock.take()
        s = self.setup
        shape = (s.n_params, s.n_layers, s.d_model)
        flops = rollout_flops(*shape, [len(r.prompt_ids) + r.length for r in generated]) + \
            train_flops(*shape, [len(r.prompt_ids) + r.length for r in train])
        return {"total": total, "generation": p.get("generation", 0.0), "scoring": p.get("scoring", 0.0),
                "forward": p.get("forward", 0.0), "backward_opt": p.get("update", 0.0) - p.get("forward", 0.0),
                "flops": flops, "generated": len(generated), "trained": len(train),
                "tokens": sum(r.length for r in generated), "reward": float(np.mean([r.reward for r in generated]))}


class OursAERO(OursStep):
    """AERO within the same n_total budget: explore n_explore, rescue, curate (as the collector)."""

    def collect(self, prompts, problems):
        cfg, a, P = self.cfg, self.cfg.aero, self.cfg.batch_prompts
        strategies = get_method(cfg.method).aero
        assert strategies is not None, f"{cfg.method} is not an AERO-family method"
        s1 = strategies.s1
        explore = self.sample(prompts, problems, a.n_explore)
        t0 = time.perf_counter()
        groups = by_prompt(explore, P)
        generated = list(explore)
        correct = np.array([sum(r.reward > 0.5 for r in g) for g in groups], dtype=np.int64)
        strata = stratify(correct, a.n_explore, a.S, a.tau)
        state = start_rescue(strata if s1 else np.full(P, int(Stratum.HIGH)), a.n_explore, cfg.n_total, P)
        self.clock.add("scoring", time.perf_counter() - t0)
        while s1:
            plan = plan_rounds(state, a.rounds_per_call, delta_n=a.delta_n, n_max=a.n_max, k_max=a.k_max, split=a.budget_split)
            if len(plan) == 0:
                break
            new = self.sample(prompts, problems, plan.sum(0).tolist())
            t0 = time.perf_counter()
            generated += new
            new_groups = by_prompt(new, P)
            state, used = replay(state, plan, [np.array([r.reward for r in g]) for g in new_groups])
            for p in range(P):
                groups[p] += [r for r, u in zip(new_groups[p], used[p]) if u]
            self.clock.add("scoring", time.perf_counter() - t0)
        t0 = time.perf_counter()
        cur = curate([np.array([r.reward for r in g]) for g in groups], strata, state.rescued_at,
                     CurationRules.from_config(a, strategies),
                     lengths_by_prompt=[np.array([r.length for r in g]) for g in groups], rng=self.rng)
        prompt_idx, roll_idx, gid = cur.flat()
        train = [groups[p][i] for p, i in zip(prompt_idx.tolist(), roll_idx.tolist())]
        adv = aero_advantages(torch.tensor([r.reward for r in train]), torch.as_tensor(gid), cur.kinds, cur.u_tilde,
                              eps=1e-6, unbiased=cfg.std_unbiased)
        self.clock.add("scoring", time.perf_counter() - t0)
        return generated, train, adv

    def update(self, train, adv) -> None:
        if train:  # every group curated away: no update (as the loop)
            super().update(train, adv)


def by_prompt(rollouts, P: int) -> list[list]:
    groups: list[list] = [[] for _ in range(P)]
    for r in rollouts:
        groups[r.prompt_index].append(r)
    return groups


def measure_gflops(threads: int, m: int = 4096, k: int = 128, n: int = 512, repeats: int = 30) -> float:
    """fp32 GFLOP/s of an [m, k] @ [k, n] matmul (a training forward's MLP shape: tokens x
    hidden x intermediate of the tiny policy), best of ``repeats`` after a warm-up."""
    torch.set_num_threads(threads)
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3):
        a @ b
    best = min(_timed_matmul(a, b) for _ in range(repeats))
    return 2.0 * m * k * n / best / 1e9


def _timed_matmul(a, b) -> float:
    t0 = time.perf_counter()
    a @ b
    return time.perf_counter() - t0


# -- TRL ---------------------------------------------------------------------------------------


def hf_tokenizer(chars: str, specials: tuple[str, ...]):
    """Our character vocabulary as a transformers fast tokenizer (ids identical to CharTokenizer:
    specials first, then one id per character), so TRL can tokenise prompts and decode."""
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {s: i for i, s in enumerate(specials)} | {c: i + len(specials) for i, c in enumerate(chars)}
    tok = Tokenizer(WordLevel(vocab, unk_token=specials[0]))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # no spaces between characters
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=specials[0], bos_token=specials[1], eos_token=specials[2])


def build_trl(cfg: RunConfig, steps: int, out_dir: str, callbacks, gradient_checkpointing: bool = False):
    """TRL's GRPOTrainer on the same policy, stream, sizes and optimizer settings as ``cfg``
    (activation checkpointing off unless asked: TRL's GRPOConfig turns it on by default)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from trainer.embedded.model import load_policy
    from trainer.tasks.arithmetic import score_exact
    from trainer.tasks.tokenizer import SPECIALS

    setup = load_setup(cfg)  # the task and its tokenizer; the model is loaded afresh below
    task, tok = setup.task, setup.task.tokenizer
    problems = task.train_problems(0, cfg.batch_prompts * steps, cfg.seed)
    data = Dataset.from_dict({"prompt": ["<bos>" + p.prompt for p in problems], "answer": [p.answer for p in problems]})

    def exact_match(prompts, completions, answer, **_):
        return [score_exact(c, a) for c, a in zip(completions, answer)]

    args = GRPOConfig(
        output_dir=out_dir, use_cpu=True, bf16=False, fp16=False, seed=cfg.seed, report_to=[], save_strategy="no",
        logging_steps=10_000, disable_tqdm=True, max_steps=steps, per_device_train_batch_size=cfg.batch_prompts * cfg.n_total,
        num_generations=cfg.n_total, gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
        max_completion_length=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p, top_k=0, beta=0.0,
        learning_rate=cfg.optim.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=cfg.optim.weight_decay,
        adam_beta1=cfg.optim.beta1, adam_beta2=cfg.optim.beta2, max_grad_norm=cfg.optim.grad_clip, optim="adamw_torch",
        epsilon=cfg.clip_eps, epsilon_high=cfg.clip_eps, loss_type="grpo", scale_rewards="group",
        entropy_coef=cfg.entropy_coef, shuffle_dataset=False, dataloader_num_workers=0, log_completions=False,
        # off for identical work (ours never recomputes activations); TRL's own default turns it on
        gradient_checkpointing=gradient_checkpointing,
    )
    model = load_policy(PRESETS["tiny"])
    model.generation_config.pad_token_id = tok.pad_id
    return GRPOTrainer(model=model, reward_funcs=exact_match, args=args, train_dataset=data,
                       processing_class=hf_tokenizer(tok.chars, SPECIALS), callbacks=callbacks)


def trl_timers(trainer, clock: Clock) -> None:
    """Wrap the trainer instance's own methods with timers (generation, scoring, forward)."""
    trainer._generate = timed(trainer._generate, clock, "generation")
    trainer._calculate_rewards = timed(trainer._calculate_rewards, clock, "rewards")
    trainer._generate_and_score_completions = timed(trainer._generate_and_score_completions, clock, "prepare")
    trainer._get_per_token_logps_and_entropies = timed(trainer._get_per_token_logps_and_entropies, clock, "forward")


def trl_split(total: float, p: dict[str, float]) -> dict[str, float]:
    gen, fwd = p.get("generation", 0.0), p.get("forward", 0.0)
    prep = p.get("prepare", 0.0)
    return {"total": total, "generation": gen, "scoring": prep - gen, "forward": fwd, "backward_opt": total - prep - fwd}


def make_interleaver(ours: list[tuple[str, OursStep]], clock: Clock, rows: dict[str, list[dict]]):
    """A TrainerCallback: times each TRL step, then runs one step of each of ``ours``."""
    from transformers import TrainerCallback

    class Interleave(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            clock.take()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            total = time.perf_counter() - self.t0
            rows["trl"].append({**trl_split(total, clock.take()), "threads": torch.get_num_threads()})
            for name, runner in ours:
                rows[name].append(runner.step())
            print(f"step {state.global_step}: " + "  ".join(f"{k} {v[-1]['total']:.2f}s" for k, v in rows.items()),
                  flush=True)

    return Interleave()


# -- report ------------------------------------------------------------------------------------


def summarise(rows: list[dict]) -> dict:
    out = {}
    for key in ("total", *PARTS):
        vals = [r[key] for r in rows]
        ci = mean_ci(vals)
        out[key] = {"mean": ci["mean"], "median": statistics.median(vals), "lo": ci["lo"], "hi": ci["hi"], "n": ci["n"]}
    for key in ("flops", "generated", "trained", "tokens", "reward"):
        vals = [r[key] for r in rows if key in r]
        if vals:
            out[key] = float(np.mean(vals))
    return out


def ratio(rows_a: list[dict], rows_b: list[dict], key: str = "total") -> dict:
    """Per-step paired ratios a/b (the interleaved steps pair up), geometric mean + 95% CI."""
    r = paired_ratios([(a[key], b[key]) for a, b in zip(rows_a, rows_b)])
    return {k: r[k] for k in ("mean", "lo", "hi", "n")}


def print_table(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"per step, {report['meta']['steps']} steps each (mean [95% CI] / median, seconds)")
    t.add_column("part")
    for name in report["summary"]:
        t.add_column(name, justify="right")
    for key in ("total", *PARTS):
        t.add_row(key, *(fmt(s[key]) for s in report["summary"].values()))
    for key in ("generated", "trained", "tokens", "reward"):
        t.add_row(key, *(f"{s.get(key, float('nan')):.2f}" for s in report["summary"].values()))
    Console(width=160).print(t)
    for name, r in report["ratios"].items():
        print(f"{name}: {r['mean']:.3f}x [{r['lo']:.3f}, {r['hi']:.3f}]" if r["lo"] is not None else f"{name}: {r['mean']}")
    f = report["floor"]
    print(f"floor: {f['gflops']:.1f} GFLOP/s measured; ours GRPO {f['grpo_gflop']:.2f} GFLOP/step -> "
          f"{f['grpo_floor_s']:.3f} s; ours {f['grpo_over_floor']:.1f}x the floor, TRL {f['trl_over_floor']:.1f}x")


def fmt(s: dict) -> str:
    ci = f" [{s['lo']:.3f}, {s['hi']:.3f}]" if s["lo"] is not None else ""
    return f"{s['mean']:.3f}{ci} / {s['median']:.3f}"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="measured steps of each, after one warm-up step each")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=16, help="completions per prompt (AERO: the budget n_total)")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--entropy-coef", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-aero", action="store_true", help="GRPO against TRL only")
    ap.add_argument("--aero-rounds-per-call", type=int, help="aero.rounds_per_call (default: the config's, 0 = all in one call)")
    ap.add_argument("--trl-gradient-checkpointing", action="store_true",
                    help="TRL with its default activation checkpointing (ours never checkpoints: not identical work)")
    ap.add_argument("--json", type=Path, help="write the report here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    clock = Clock()
    ours = [("ours_grpo", OursStep(tiny_config(args, "grpo")))]
    if not args.no_aero:
        ours.append(("ours_aero", OursAERO(tiny_config(args, "aero"))))
    rows: dict[str, list[dict]] = {"trl": [], **{name: [] for name, _ in ours}}
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trl(tiny_config(args), args.steps + 1, tmp, [], args.trl_gradient_checkpointing)
        trainer.add_callback(make_interleaver(ours, clock, rows))
        trl_timers(trainer, clock)
        trainer.train()
    rows = {k: v[1:] for k, v in rows.items()}  # drop the warm-up step of each
    report = build_report(args, rows)
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return report


def build_report(args, rows: dict[str, list[dict]]) -> dict:
    summary = {k: summarise(v) for k, v in rows.items()}
    gflops = measure_gflops(args.threads)
    g = summary["ours_grpo"]
    floor_s = g["flops"] / (gflops * 1e9)
    ratios = {"ours_grpo/trl": ratio(rows["ours_grpo"], rows["trl"])}
    if "ours_aero" in rows:
        ratios["ours_aero/trl"] = ratio(rows["ours_aero"], rows["trl"])
        ratios["ours_aero/ours_grpo"] = ratio(rows["ours_aero"], rows["ours_grpo"])
    for part in PARTS:
        ratios[f"ours_grpo/trl {part}"] = ratio(rows["ours_grpo"], rows["trl"], part)
    meta = {"steps": len(rows["trl"]), "prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens,
            "lr": args.lr, "threads": args.threads, "trl_gradient_checkpointing": args.trl_gradient_checkpointing,
            "threads_seen_in_trl_steps": sorted({r["threads"] for r in rows["trl"]}),
            "seed": args.seed, "torch": torch.__version__,
            "python": platform.python_version(), "machine": platform.machine(), "processor": platform.processor()}
    try:
        import transformers
        import trl

        meta.update({"trl": trl.__version__, "transformers": transformers.__version__})
    except ImportError:
        pass
    return {"meta": meta, "summary": summary, "ratios": ratios, "rows": rows,
            "floor": {"gflops": gflops, "grpo_gflop": g["flops"] / 1e9, "grpo_floor_s": floor_s,
                      "grpo_over_floor": g["total"]["mean"] / floor_s,
                      "trl_over_floor": summary["trl"]["total"]["mean"] / floor_s}}


if __name__ == "__main__":
    main()
