"""Per-method rollout collection: generate, score, curate, compute advantages.

Each collector takes the step context and the data position, and returns ``Collected``: the
rollouts to train on with their advantages, every rollout generated (for cost accounting),
and the method's own metrics. The loop does not know which method it runs.

Every method spends at most ``n_total`` rollouts per prompt (the equal-budget comparison):
GRPO and DAPO generate n_total per prompt; AERO explores with n_explore and shares
(n_total - n_explore) * P among the rescue prompts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from trainer.config import RunConfig
from trainer.core.advantages import grpo_advantage
from trainer.core.aero import Stratum, aero_advantages, curate, plan_rounds, replay, start_rescue, stratify
from trainer.core.dapo import nonzero_variance_mask, overlong_penalty
from trainer.core.savings import savings_cost, waterfall
from trainer.metrics import rollout_flops, train_flops
from trainer.rollout.base import Rollout, RolloutEngine, SamplingParams
from trainer.tasks.base import Problem, Task
from trainer.tasks.verify import score_batch


@dataclass
class StepContext:
    cfg: RunConfig
    task: Task
    engine: RolloutEngine
    sampling: SamplingParams
    gen: torch.Generator  # sampling RNG (checkpointed)
    rng: np.random.Generator  # curation RNG (checkpointed)


@dataclass
class Collected:
    train: list[Rollout]
    advantages: torch.Tensor
    generated: list[Rollout]
    prompts_used: int
    stats: dict[str, float] = field(default_factory=dict)
    time_rollout: float = 0.0
    time_reward: float = 0.0
    gen_calls: int = 0
    ledger: dict | None = None  # AERO only: per-prompt facts for the counterfactual savings


class _Sampler:
    """Generate + score with timing and verifier-failure counts accumulated over a step."""

    def __init__(self, ctx: StepContext):
        self.ctx, self.t_gen, self.t_rew, self.calls, self.scored = ctx, 0.0, 0.0, 0, 0
        self.failures: dict[str, float] = {"errors": 0, "timeouts": 0}

    def __call__(self, prompts: list[list[int]], problems: list[Problem], n, round_: int = 0) -> list[Rollout]:
        t0 = time.perf_counter()
        rollouts = self.ctx.engine.generate(prompts, n, self.ctx.sampling, self.ctx.gen)
        t1 = time.perf_counter()
        tok = self.ctx.task.tokenizer
        rewards, fails = score_batch(self.ctx.task, [tok.decode(r.response_ids) for r in rollouts],
                                     [problems[r.prompt_index] for r in rollouts], self.ctx.cfg.verifier_timeout_s)
        for r, rew in zip(rollouts, rewards):
            r.reward, r.round = float(rew), round_
        self.t_gen += t1 - t0
        self.t_rew += time.perf_counter() - t1
        self.calls += 1
        self.scored += len(rollouts)
        for k in fails:
            self.failures[k] = self.failures.get(k, 0) + fails[k]
        return rollouts

    def finish(self, c: Collected) -> Collected:
        c.time_rollout, c.time_reward, c.gen_calls = self.t_gen, self.t_rew, self.calls
        c.stats["verifier/errors"] = self.failures["errors"]
        c.stats["verifier/timeouts"] = self.failures["timeouts"]
        # Code task: sandbox outcome counts, and the mean per-response test pass rate.
        c.stats.update({k: float(v) for k, v in self.failures.items() if k.startswith("sandbox/")})
        if "test_pass_sum" in self.failures:
            c.stats["reward/test_pass_rate"] = self.failures["test_pass_sum"] / max(1, self.scored)
        return c


def _by_prompt(rollouts: list[Rollout], P: int) -> list[list[Rollout]]:
    groups: list[list[Rollout]] = [[] for _ in range(P)]
    for r in rollouts:
        groups[r.prompt_index].append(r)
    return groups


def _correct(groups: list[list[Rollout]]) -> np.ndarray:
    return np.array([sum(r.reward > 0.5 for r in g) for g in groups], dtype=np.int64)


def strata_stats(correct: np.ndarray, n: int, cfg: RunConfig) -> dict[str, float]:
    strata = stratify(correct, n, cfg.aero.S, cfg.aero.tau)
    P = len(correct)
    return {"strata/rescue": float((strata == Stratum.RESCUE).sum()), "strata/low": float((strata == Stratum.LOW).sum()),
            "strata/high": float((strata == Stratum.HIGH).sum()), "strata/all_fail": float((correct == 0).sum()),
            "strata/all_correct": float((correct == n).sum()), "zero_acc/after_explore": float((correct == 0).mean()),
            "all_correct/ratio": float((correct == n).sum() / P)}


def _grpo_adv(cfg: RunConfig, rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    return grpo_advantage(rewards, group_ids, eps=1e-6, unbiased=cfg.std_unbiased,
                          normalize_std=cfg.adv_estimator == "grpo")


def collect_grpo(ctx: StepContext, data_pos: int) -> Collected:
    """GRPO: n_total rollouts per prompt, all trained, A = (r - mean) / (std + eps) per group."""
    cfg, P = ctx.cfg, ctx.cfg.batch_prompts
    problems = ctx.task.train_problems(data_pos, P, cfg.seed)
    sample = _Sampler(ctx)
    rollouts = sample([ctx.task.encode_prompt(p) for p in problems], problems, cfg.n_total)
    rewards = torch.tensor([r.reward for r in rollouts])
    adv = _grpo_adv(cfg, rewards, torch.tensor([r.prompt_index for r in rollouts]))
    correct = _correct(_by_prompt(rollouts, P))
    stats = strata_stats(correct, cfg.n_total, cfg)
    stats["zero_acc/after_rescue"] = stats["zero_acc/after_explore"]
    return sample.finish(Collected(train=rollouts, advantages=adv, generated=rollouts, prompts_used=P, stats=stats))


def collect_dapo(ctx: StepContext, data_pos: int) -> Collected:
    """DAPO: n_total rollouts per prompt, overlong-shaped rewards, dynamic sampling.

    Groups whose accuracy has zero variance are dropped; more prompt batches are generated
    until P groups are kept or ``dapo.max_gen_rounds`` batches were generated (default 1 =
    GRPO's budget). When the cap is hit the step trains on the groups it has (possibly none)
    and counts it in ``dapo/cap_hit``.
    """
    cfg, P, d = ctx.cfg, ctx.cfg.batch_prompts, ctx.cfg.dapo
    sample = _Sampler(ctx)
    kept_groups: list[list[Rollout]] = []
    generated: list[Rollout] = []
    first_correct = None
    rounds, used = 0, 0
    while rounds < d.max_gen_rounds and len(kept_groups) < P:
        problems = ctx.task.train_problems(data_pos + used, P, cfg.seed)
        used += P
        rollouts = sample([ctx.task.encode_prompt(p) for p in problems], problems, cfg.n_total, round_=rounds)
        generated += rollouts
        acc = torch.tensor([r.reward for r in rollouts])
        gid = torch.tensor([r.prompt_index for r in rollouts])
        if first_correct is None:
            first_correct = _correct(_by_prompt(rollouts, P))
        keep = nonzero_variance_mask(acc, gid) if d.dynamic_sampling else torch.ones(len(rollouts), dtype=torch.bool)
        groups = _by_prompt([r for r, k in zip(rollouts, keep.tolist()) if k], P)
        kept_groups += [g for g in groups if g][: P - len(kept_groups)]
        rounds += 1
    train = [r for g in kept_groups for r in g]
    lengths = torch.tensor([r.length for r in train], dtype=torch.float32)
    shaped = torch.tensor([r.reward for r in train]) + overlong_penalty(
        lengths, cfg.max_new_tokens, d.overlong_buffer, d.overlong_penalty)
    gid = torch.tensor([g for g, grp in enumerate(kept_groups) for _ in grp], dtype=torch.long)
    adv = _grpo_adv(cfg, shaped, gid) if train else torch.zeros(0)
    stats = strata_stats(first_correct, cfg.n_total, cfg)
    stats["zero_acc/after_rescue"] = stats["zero_acc/after_explore"]
    stats.update({"dapo/gen_rounds": float(rounds), "dapo/kept_groups": float(len(kept_groups)),
                  "dapo/cap_hit": float(len(kept_groups) < P)})
    return sample.finish(Collected(train=train, advantages=adv, generated=generated, prompts_used=used, stats=stats))


def collect_aero(ctx: StepContext, data_pos: int) -> Collected:
    """AERO (Algorithm 1): explore, stratify, rescue (S1), curate (S2, S3), advantages.

    The ablations aero-s1 and aero-s1s2 switch S2/S3 off via ``cfg.strategies``. Rescue rounds
    are generated ``aero.rounds_per_call`` at a time (1 = the paper's sequential loop) and
    replayed in generation order (trainer.core.aero.replay)."""
    cfg, a, P = ctx.cfg, ctx.cfg.aero, ctx.cfg.batch_prompts
    s1, s2, s3 = cfg.strategies
    problems = ctx.task.train_problems(data_pos, P, cfg.seed)
    prompts = [ctx.task.encode_prompt(p) for p in problems]
    sample = _Sampler(ctx)
    explore = sample(prompts, problems, a.n_explore)
    groups = _by_prompt(explore, P)
    generated = list(explore)
    correct = _correct(groups)
    strata = stratify(correct, a.n_explore, a.S, a.tau)
    state = start_rescue(strata if s1 else np.full(P, int(Stratum.HIGH)), a.n_explore, cfg.n_total, P)
    while s1:
        plan = plan_rounds(state, a.rounds_per_call, delta_n=a.delta_n, n_max=a.n_max, k_max=a.k_max,
                           split=a.budget_split)
        if len(plan) == 0:
            break
        new = sample(prompts, problems, plan.sum(0).tolist(), round_=state.rounds_used + 1)
        generated += new
        new_groups = _by_prompt(new, P)
        state, used = replay(state, plan, [np.array([r.reward for r in g]) for g in new_groups])
        for p in range(P):
            groups[p] += [r for r, u in zip(new_groups[p], used[p]) if u]
    curated = curate([np.array([r.reward for r in g]) for g in groups], strata, state.rescued_at, s1=s1, s2=s2, s3=s3,
                     n_explore=a.n_explore, alpha0=a.alpha0, beta0=a.beta0, k=a.k,
                     zero_variance_keep=a.zero_variance_keep, negative_selection=a.negative_selection,
                     rescue_negative=a.rescue_negative, zero_variance_selection=a.zero_variance_selection,
                     lengths_by_prompt=[np.array([r.length for r in g]) for g in groups], rng=ctx.rng)
    prompt_idx, roll_idx, gid = curated.flat()
    train = [groups[p][i] for p, i in zip(prompt_idx.tolist(), roll_idx.tolist())]
    adv = aero_advantages(torch.tensor([r.reward for r in train]), torch.as_tensor(gid), curated.kinds,
                          curated.u_tilde, eps=1e-6, unbiased=cfg.std_unbiased,
                          normalize_std=cfg.adv_estimator == "grpo")
    stats = strata_stats(correct, a.n_explore, cfg)
    stats.update({
        "zero_acc/after_rescue": float((curated.correct == 0).mean()),
        "rescue/rescued": float(state.rescued.sum()), "rescue/rounds": float(state.rounds_used),
        "rescue/calls": float(sample.calls - 1), "rescue/generated": float(len(generated) - len(explore)),
        "rescue/unused": float(state.unused),
        **{f"groups/{kind}": float(curated.kinds.count(kind)) for kind in ("rescued", "bayes", "low", "high", "zero")},
    })
    c = Collected(train=train, advantages=adv, generated=generated, prompts_used=P, stats=stats)
    c.ledger = dict(strata=strata, rescued=np.array([k == "rescued" for k in curated.kinds]),
                    produced=curated.produced, correct=curated.correct,
                    mean_tokens=np.array([np.mean([len(r.prompt_ids) + r.length for r in g]) for g in groups]))
    return sample.finish(c)


COLLECTORS: dict[str, Callable[[StepContext, int], Collected]] = {
    "grpo": collect_grpo, "dapo": collect_dapo, "aero": collect_aero, "aero-s1": collect_aero, "aero-s1s2": collect_aero,
}


def step_metrics(cfg: RunConfig, setup, c: Collected, train_stats: dict[str, float], *, time_collect: float,
                 time_train: float, extra_forwards: int) -> dict[str, float]:
    """All per-step metrics (docs/metrics.md): time, rollouts, tokens, FLOPs, rewards, advantages."""
    gen_len = [len(r.prompt_ids) + r.length for r in c.generated]
    tr_len = [len(r.prompt_ids) + r.length for r in c.train]
    shape = (setup.n_params, setup.n_layers, setup.d_model)
    f_roll, f_train = rollout_flops(*shape, gen_len), train_flops(*shape, tr_len, extra_forwards)
    adv = c.advantages.float()
    m = {
        "time/step_s": time_collect + time_train, "time/rollout_s": c.time_rollout, "time/reward_s": c.time_reward,
        "time/train_s": time_train, "rollout/generated": float(len(c.generated)), "rollout/trained": float(len(c.train)),
        "rollout/gen_calls": float(c.gen_calls), "tokens/generated": float(sum(r.length for r in c.generated)),
        "tokens/trained": float(sum(tr_len)), "tokens/response_trained": float(sum(r.length for r in c.train)),
        "flops/rollout": f_roll, "flops/train": f_train, "flops/total": f_roll + f_train,
        "reward/mean": float(np.mean([r.reward for r in c.generated])) if c.generated else 0.0,
        "reward/trained_mean": float(np.mean([r.reward for r in c.train])) if c.train else 0.0,
        "response/length_mean": float(np.mean([r.length for r in c.generated])) if c.generated else 0.0,
        "response/truncated_frac": float(np.mean([not r.finished for r in c.generated])) if c.generated else 0.0,
        "adv/abs_mean": float(adv.abs().mean()) if adv.numel() else 0.0,
        "adv/zero_frac": float((adv.abs() < 1e-8).float().mean()) if adv.numel() else 1.0,
        "prompts/used": float(c.prompts_used),
        **c.stats, **train_stats,
    }
    if c.ledger is not None and tr_len:
        m.update(savings_metrics(cfg, c.ledger, flops_per_token=f_train / sum(tr_len),
                                 seconds_per_token=time_train / sum(tr_len)))
    return m


def savings_metrics(cfg: RunConfig, ledger: dict, flops_per_token: float, seconds_per_token: float) -> dict[str, float]:
    """Counterfactual S1/S2/S3 savings against GRPO at the same budget (trainer.core.savings),
    in trained rollouts, tokens, FLOPs and seconds (seconds from this step's measured cost per
    trained token)."""
    w = waterfall(**ledger, n_total=cfg.n_total, zero_variance_keep=cfg.aero.zero_variance_keep, k=cfg.aero.k)
    cost = savings_cost(w.saved_tokens, flops_per_token, seconds_per_token)
    out = {f"savings/grpo_rollouts": w.rollouts["grpo"], "savings/grpo_tokens": w.tokens["grpo"]}
    for s in ("s1", "s2", "s3"):
        out.update({f"savings/{s}_rollouts": w.saved_rollouts[s], f"savings/{s}_tokens": w.saved_tokens[s],
                    f"savings/{s}_flops": cost["flops"][s], f"savings/{s}_s": cost["seconds"][s]})
    return out
