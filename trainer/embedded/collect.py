"""The embedded engine's adapter for the method steps (trainer/methods/): generate, score, and
turn a step's result into the rollouts and advantages the policy update trains on.

:func:`collect` wraps the rollout sampler, the task and the verifier as a
:class:`trainer.methods.sampler.Sampler` (:class:`EmbeddedSampler`), runs the method's
registered step, and returns ``Collected``: the rollouts to train on with their advantages,
every rollout generated (for cost accounting), and the method's own metrics. The loop does not
know which method it runs.

Every method spends at most ``n_total`` rollouts per prompt (the equal-budget comparison):
GRPO and DAPO generate n_total per prompt; AERO explores with n_explore and shares
(n_total - n_explore) * P among the rescue prompts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

import common.metric_keys as mk
from trainer.spec.config import RunConfig
from trainer.core.strata import is_correct
from trainer.core.flops import step_accounting
from trainer.methods.sampler import Samples
from trainer.methods.spec import get_step
from trainer.methods.step import CostMetrics, StepResult
from trainer.rollout.base import Rollout, RolloutSampler, SamplingParams
from trainer.platform.step_detail import SampleRules, StepRows, step_detail
from trainer.tasks.base import Problem, Task
from trainer.tasks.verify import score_batch


@dataclass
class StepContext:
    cfg: RunConfig
    task: Task
    sampler: RolloutSampler  # generates the rollouts (cfg.rollout.sampler); the method's Sampler is EmbeddedSampler
    sampling: SamplingParams
    gen: torch.Generator  # sampling RNG (checkpointed)
    rng: np.random.Generator  # curation RNG (checkpointed)
    method_state: dict = field(default_factory=dict)  # a method's plain-data state across steps (checkpointed)
    sample_rules: SampleRules | None = None  # the stored rollout sample's rule (None: store no detail)
    # the last step's rollout sample and histograms (trainer/platform/step_detail.py), built on demand by
    # the loop after the step's clock stops, so storing it never counts as the method's time
    detail: Callable[[], dict | None] | None = None


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
    cost_metrics: CostMetrics | None = None  # the step's metrics that need its cost per trained token


class TimedScorer:
    """One sampler call + the verifier over its rollouts, with the step's generation and scoring
    times, call count and verifier-failure counts accumulated (what EmbeddedSampler generates with)."""

    def __init__(self, ctx: StepContext):
        self.ctx, self.t_gen, self.t_rew, self.calls, self.scored = ctx, 0.0, 0.0, 0, 0
        self.t_first = 0.0  # the step's first generation call (AERO: exploration)
        self.failures: dict[str, float] = {"errors": 0, "timeouts": 0}

    def __call__(self, prompts: list[list[int]], problems: list[Problem], n, round_: int = 0,
                 keys: list[int] | None = None) -> list[Rollout]:
        t0 = time.perf_counter()
        kw = {} if keys is None else {"keys": keys}
        rollouts = self.ctx.sampler.generate(prompts, n, self.ctx.sampling, self.ctx.gen, **kw)
        self.generated(time.perf_counter() - t0)
        return self.score(rollouts, problems, round_)

    def generated(self, seconds: float) -> None:
        """One generation call took ``seconds`` (scoring inside it excluded)."""
        self.t_gen += seconds
        if self.calls == 0:
            self.t_first = seconds
        self.calls += 1

    def score(self, rollouts: list[Rollout], problems: list[Problem], round_: int) -> list[Rollout]:
        """The verifier over ``rollouts`` (their problems by ``prompt_index``): rewards and round set."""
        t1 = time.perf_counter()
        tok = self.ctx.task.tokenizer
        rewards, fails = score_batch(self.ctx.task, [tok.decode(r.response_ids) for r in rollouts],
                                     [problems[r.prompt_index] for r in rollouts], self.ctx.cfg.verifier_timeout_s)
        for r, rew in zip(rollouts, rewards):
            r.reward, r.round = float(rew), round_
        self.t_rew += time.perf_counter() - t1
        self.scored += len(rollouts)
        for k in fails:
            self.failures[k] = self.failures.get(k, 0) + fails[k]
        return rollouts

    def finish(self, c: Collected) -> Collected:
        c.time_rollout, c.time_reward, c.gen_calls = self.t_gen, self.t_rew, self.calls
        # the generation split: the first call (AERO's exploration, DAPO's first batch) and the rest
        c.stats["time/first_call_s"] = self.t_first
        c.stats["time/more_calls_s"] = self.t_gen - self.t_first
        c.stats["verifier/errors"] = self.failures["errors"]
        c.stats["verifier/timeouts"] = self.failures["timeouts"]
        # Code task: sandbox outcome counts, and the mean per-response test pass rate.
        c.stats.update({k: float(v) for k, v in self.failures.items() if k.startswith("sandbox/")})
        if "test_pass_sum" in self.failures:
            c.stats["reward/test_pass_rate"] = self.failures["test_pass_sum"] / max(1, self.scored)
        return c


class EmbeddedSampler:
    """The Sampler of one step over the rollout sampler (hf or vLLM) and the task's verifier.

    Prompt batches are the next ``batch_prompts`` problems of the seeded training stream from
    ``data_pos``; ``rollouts[i]`` is the rollout of global row id i."""

    def __init__(self, ctx: StepContext, data_pos: int):
        self.ctx, self.data_pos, self.used = ctx, data_pos, 0
        self.timed = TimedScorer(ctx)
        self.state = ctx.method_state
        self.rollouts: list[Rollout] = []
        self.problems: list[Problem] = []
        self.prompts: list[list[int]] = []
        self.groups: list[int] = []  # per generated row, its prompt group among all prompts drawn this step
        self.step_key: int | None = None  # rollout.rng="per-row": the step's key, drawn on first use
        self.next_index: dict[int, int] = {}  # per prompt of the stream, its next rollout index this step

    def next_prompts(self) -> int:
        cfg, task = self.ctx.cfg, self.ctx.task
        self.problems = task.train_problems(self.data_pos + self.used, cfg.batch_prompts, cfg.seed)
        self.prompts = [task.encode_prompt(p) for p in self.problems]
        self.used += len(self.problems)
        return len(self.problems)

    def prompt_keys(self) -> list[str | None]:
        return [p.meta.get("where") for p in self.problems]

    def sample(self, counts: Sequence[int], round_: int) -> Samples:
        keys = None
        if self.ctx.cfg.rollout.rng == "per-row":
            keys = [k for p, n in enumerate(counts) for k in self._keys(p, int(n))]
        return self._add(self.timed(self.prompts, self.problems, list(counts), round_, keys))

    def _add(self, new: list[Rollout]) -> Samples:
        first = len(self.rollouts)
        self.rollouts += new
        self.groups += [self.used - len(self.problems) + r.prompt_index for r in new]
        return Samples.build(first, [r.prompt_index for r in new], [r.reward for r in new], [r.length for r in new],
                             [len(r.prompt_ids) + r.length for r in new])

    def _keys(self, p: int, n: int) -> list[int]:
        """The sampling keys of prompt p's next n rollouts this step (rollout.rng="per-row"): keyed by
        the step, the prompt's place in the data stream and the rollout's index among the prompt's,
        so a rollout gets the same key whichever call or batch samples it."""
        from trainer.rollout.keyed import row_key

        if self.step_key is None:  # one draw of the run's generator per step: a resumed run draws it again
            self.step_key = int(torch.randint(0, 2**62, (1,), generator=self.ctx.gen, device=self.ctx.gen.device))
        g = self.used - len(self.problems) + p
        k0 = self.next_index.get(g, 0)
        self.next_index[g] = k0 + n
        return [row_key(self.step_key, g, k) for k in range(k0, k0 + n)]

    def stream(self, first: Sequence[int], react) -> list[Samples]:
        """:meth:`trainer.methods.sampler.Sampler.stream` on the hf sampler's continuous batch."""
        from trainer.rollout.continuous import Block

        firsts: list[int] = []  # each block's first global row id, in the order asked for
        parts: dict[int, Samples] = {}
        next_row = [len(self.rollouts)]

        def blocks(asks) -> list[Block]:
            out = []
            for p, n, round_ in asks:
                if n > 0:
                    firsts.append(next_row[0])
                    next_row[0] += int(n)
                    out.append(Block(int(p), tuple(self._keys(int(p), int(n))), int(round_)))
            return out

        def on_block(bid: int, rollouts: list[Rollout]) -> list[Block]:
            self.timed.score(rollouts, self.problems, rollouts[0].round)
            part = Samples.build(firsts[bid], [r.prompt_index for r in rollouts], [r.reward for r in rollouts],
                                 [r.length for r in rollouts], [len(r.prompt_ids) + r.length for r in rollouts])
            parts[bid] = part
            return blocks(react(part, rollouts[0].round))

        t0, rew0 = time.perf_counter(), self.timed.t_rew
        new = self.ctx.sampler.stream(self.prompts, blocks([(p, n, 0) for p, n in enumerate(first)]),  # type: ignore[attr-defined]
                                      self.ctx.sampling, on_block)
        self.timed.generated(time.perf_counter() - t0 - (self.timed.t_rew - rew0))
        self._add(new)
        return [parts[b] for b in range(len(parts))]

    def step_rows(self) -> StepRows:
        """Every row of the step, for its stored sample (texts decoded on demand)."""
        rs, decode = self.rollouts, self.ctx.task.tokenizer.decode
        return StepRows(group=np.asarray(self.groups, dtype=np.int64), round_=np.array([r.round for r in rs], dtype=np.int64),
                        reward=np.array([r.reward for r in rs]), correct=is_correct([r.reward for r in rs]),
                        length=np.array([r.length for r in rs], dtype=np.int64),
                        truncated=np.array([not r.finished for r in rs], dtype=bool),
                        prompt_text=lambda i: decode(rs[i].prompt_ids), response_text=lambda i: decode(rs[i].response_ids),
                        version=np.array([r.version for r in rs], dtype=np.int64))


def sample_detail(ctx: StepContext, sampler: EmbeddedSampler, res: StepResult, data_pos: int) -> dict | None:
    """The step's stored rollout sample and histograms, or None when the context stores none."""
    if ctx.sample_rules is None or not sampler.rollouts:
        return None
    return step_detail(sampler.step_rows(), res.rows, res.advantages, cfg=ctx.cfg, rules=ctx.sample_rules, seed_key=data_pos)


def collect(ctx: StepContext, data_pos: int) -> Collected:
    """One step of ``cfg.method`` (its registered step) on the embedded engine."""
    cfg = ctx.cfg
    sampler = EmbeddedSampler(ctx, data_pos)
    res = get_step(cfg.method)(cfg, sampler, ctx.rng)
    c = Collected(train=[sampler.rollouts[i] for i in res.rows.tolist()], advantages=torch.from_numpy(res.advantages),
                  generated=sampler.rollouts, prompts_used=res.prompts_used, stats=res.stats,
                  cost_metrics=res.cost_metrics)
    ctx.detail = partial(sample_detail, ctx, sampler, res, data_pos)
    return sampler.timed.finish(c)


def step_metrics(cfg: RunConfig, setup, c: Collected, train_stats: dict[str, float], *, time_collect: float,
                 time_train: float, extra_forwards: int) -> dict[str, float]:
    """All per-step metrics (docs/metrics.md): time, rollouts, tokens, FLOPs, rewards, advantages."""
    tr_len = [len(r.prompt_ids) + r.length for r in c.train]
    shape = (setup.n_params, setup.n_layers, setup.d_model)
    m = {
        mk.STEP_S: time_collect + time_train, mk.ROLLOUT_S: c.time_rollout, mk.REWARD_S: c.time_reward,
        mk.TRAIN_S: time_train, mk.GEN_CALLS: float(c.gen_calls), mk.PROMPTS_USED: float(c.prompts_used),
        **step_accounting(shape, gen_lengths=[len(r.prompt_ids) + r.length for r in c.generated],
                          gen_response=[r.length for r in c.generated], gen_rewards=[r.reward for r in c.generated],
                          gen_truncated=[not r.finished for r in c.generated], train_lengths=tr_len,
                          train_response=[r.length for r in c.train], train_rewards=[r.reward for r in c.train],
                          train_advantages=c.advantages.float().tolist(), extra_forwards=extra_forwards),
        **c.stats, **train_stats,
    }
    f_train = m[mk.FLOPS_TRAIN]
    if c.cost_metrics is not None and tr_len:
        m.update(c.cost_metrics(f_train / sum(tr_len), time_train / sum(tr_len)))
    return m
