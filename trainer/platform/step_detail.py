"""A step's stored detail: a bounded sample of its rollouts (text included) and fixed-bin
histograms of per-prompt pass rate and response length. Engine-independent: both adapters
(trainer/embedded/collect.py, trainer/verl/trainer.py) describe every generated row of a step
as a :class:`StepRows` and call :func:`step_detail`; the sinks store the result apart from the
numeric metrics (``MetricSink.log_detail``). docs/metrics.md "Rollouts and histograms".

The sample rule (operator settings, trainer/spec/operator_policy.py; never the submitter's):

- every *rescued* group (AERO: a prompt that explored with c <= S and whose rescue rounds
  found a correct rollout): what the rescue rounds found;
- then ``prompts`` groups drawn at random from the rest, with a generator seeded by the run's
  seed and the step's data position (reproducible; it never draws from the training RNGs, so
  storing a sample does not change training);
- each picked group with all its rollouts (explore, rescue rounds, curated out), whole groups
  only, until ``max_rows`` rollouts are taken;
- every text clipped to ``text_chars`` characters (``clipped`` says so), NUL and lone
  surrogates replaced: model text is hostile input, stored as plain text and escaped by every
  reader (the dashboard renders it as text, the CLI strips control characters).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

PASS_BINS = 10  # pass-rate bins: [0, 0.1), ..., [0.9, 1.0] (the last bin closed)
LENGTH_BINS = 16  # response-length bins: equal widths over [0, max_new_tokens]
STRATUM_NAMES = ("rescue", "low", "high")  # trainer.core.strata.Stratum order

DEFAULT_PROMPTS, DEFAULT_MAX_ROWS, DEFAULT_TEXT_CHARS = 4, 256, 2000


@dataclass(frozen=True)
class SampleRules:
    """How much of each step is stored (module docstring). ``prompts = 0`` stores no rollouts
    (the histograms still are)."""

    prompts: int = DEFAULT_PROMPTS
    max_rows: int = DEFAULT_MAX_ROWS
    text_chars: int = DEFAULT_TEXT_CHARS

    @classmethod
    def from_policy(cls, policy) -> SampleRules:
        if policy is None:
            return cls.from_env()
        return cls(policy.rollout_sample_prompts, policy.rollout_sample_max_rows, policy.rollout_text_chars)

    @classmethod
    def from_env(cls) -> SampleRules:
        """The operator's settings from the environment (a verl trainer process gets no policy object)."""
        from trainer.spec.operator_policy import RunPolicy

        return cls.from_policy(RunPolicy.from_env(os.environ))


@dataclass
class StepRows:
    """Every row a step generated, in generation order (global row id = index).

    group: int[N] the prompt group (distinct per prompt drawn in the step, DAPO's later batches
    included); round_: int[N] the generation round (0 = the first call); reward: float[N];
    correct: bool[N]; length: int[N] response tokens; truncated: bool[N] cut at max_new_tokens;
    prompt_text / response_text: row id -> text, decoded only for the rows sampled; version:
    int[N] the policy version (training steps done) that sampled each row: the step before on a
    synchronous run, up to ``offpolicy.max_staleness`` older on an asynchronous one."""

    group: np.ndarray
    round_: np.ndarray
    reward: np.ndarray
    correct: np.ndarray
    length: np.ndarray
    truncated: np.ndarray
    prompt_text: Callable[[int], str]
    response_text: Callable[[int], str]
    version: np.ndarray


def clip_text(text: str, limit: int) -> tuple[str, bool]:
    """(text safe to store, whether it was clipped): NUL (refused by PostgreSQL's JSON) and lone
    surrogates (not UTF-8) replaced (by U+FFFD and "?"), then at most ``limit`` characters."""
    safe = text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    return (safe[:limit], True) if len(safe) > limit else (safe, False)


def group_strata(group: np.ndarray, round_: np.ndarray, correct: np.ndarray, S: int, tau: float) -> dict[int, int]:
    """{group: Stratum value} from each group's rows of its first round (its exploration), as
    trainer.core.strata.stratify sorts prompts (c <= S rescue, u >= tau high, else low)."""
    out = {}
    for g in np.unique(group):
        rows = group == g
        first = rows & (round_ == round_[rows].min())
        c, n = int(correct[first].sum()), int(first.sum())
        out[int(g)] = 0 if c <= S else (2 if c / n >= tau else 1)
    return out


def pick_groups(rows: StepRows, strata: dict[int, int], rules: SampleRules, rng: np.random.Generator) -> list[int]:
    """The groups to store (module docstring): every rescued group, then ``rules.prompts`` random
    others, whole groups while ``rules.max_rows`` allows."""
    if rules.prompts <= 0 or rules.max_rows <= 0:
        return []
    groups = [int(g) for g in np.unique(rows.group)]
    later = {int(g) for g in np.unique(rows.group[rows.round_ > 0])}
    first = [g for g in groups if strata[g] == 0 and g in later and (rows.round_[rows.group == g] == 0).any()
             and (rows.correct & (rows.group == g) & (rows.round_ > 0)).any()]
    rest = [g for g in groups if g not in set(first)]
    drawn = [rest[i] for i in rng.permutation(len(rest))[:rules.prompts]]
    picked, total = [], 0
    for g in first + drawn:
        size = int((rows.group == g).sum())
        if total + size > rules.max_rows:
            continue
        picked.append(g)
        total += size
    return picked


def stage_of(round_: int, kept: bool, stratum: int) -> str:
    """The row's place in the step: "explore", "rescue r" (AERO's rescue round r), "round r"
    (another generation round: DAPO's r-th extra prompt batch) or "curated out" (generated, not trained)."""
    if not kept:
        return "curated out"
    if round_ == 0:
        return "explore"
    return f"rescue {round_}" if stratum == 0 else f"round {round_}"


def rollout_records(rows: StepRows, picked: list[int], advantage: dict[int, float], strata: dict[int, int],
                    text_chars: int) -> list[dict[str, Any]]:
    """One plain dict per row of the picked groups, in group then generation order."""
    out = []
    for g in picked:
        for i in np.flatnonzero(rows.group == g).tolist():
            prompt, p_clip = clip_text(rows.prompt_text(i), text_chars)
            response, r_clip = clip_text(rows.response_text(i), text_chars)
            kept = i in advantage
            out.append({"group": g, "row": i, "prompt": prompt, "response": response,
                        "reward": float(rows.reward[i]), "correct": bool(rows.correct[i]),
                        "advantage": advantage[i] if kept else None, "stratum": STRATUM_NAMES[strata[g]],
                        "round": int(rows.round_[i]), "version": int(rows.version[i]), "stage": stage_of(int(rows.round_[i]), kept, strata[g]),
                        "length": int(rows.length[i]), "truncated": bool(rows.truncated[i]),
                        "clipped": p_clip or r_clip})
    return out


def fixed_histogram(values: np.ndarray, lo: float, hi: float, bins: int) -> list[int]:
    """Counts in ``bins`` equal bins over [lo, hi] (the last bin closed; values outside clamp)."""
    if len(values) == 0:
        return [0] * bins
    idx = np.clip(np.floor((np.asarray(values, dtype=np.float64) - lo) / (hi - lo) * bins), 0, bins - 1).astype(np.int64)
    return np.bincount(idx, minlength=bins).tolist()


def step_histograms(rows: StepRows, max_new_tokens: int) -> dict[str, dict[str, Any]]:
    """Fixed-bin histograms of the step: per-prompt pass rate (correct / rollouts over all the
    group's rows) and response length (every generated row). Stored as {"lo", "hi", "counts"}."""
    groups = np.unique(rows.group)
    rate = np.array([rows.correct[rows.group == g].mean() for g in groups]) if len(groups) else np.zeros(0)
    hi = max(1, int(max_new_tokens))
    return {"pass_rate": {"lo": 0.0, "hi": 1.0, "counts": fixed_histogram(rate, 0.0, 1.0, PASS_BINS)},
            "length": {"lo": 0.0, "hi": float(hi), "counts": fixed_histogram(rows.length, 0.0, float(hi), LENGTH_BINS)}}


def step_detail(rows: StepRows, train_rows: np.ndarray, advantages: np.ndarray, *, cfg, rules: SampleRules,
                seed_key: int) -> dict[str, Any]:
    """A step's stored detail: {"rollouts": [...], "histograms": {...}} (module docstring).
    ``train_rows``/``advantages``: the step's training rows (global ids) and their advantages;
    ``seed_key``: the step's data position, which with ``cfg.seed`` seeds the sample's draw."""
    aero = getattr(cfg, "aero", None)  # AERO's own S and tau; the platform strata's defaults otherwise
    S, tau = (aero.S, aero.tau) if aero is not None else (0, 0.5)
    strata = group_strata(rows.group, rows.round_, rows.correct, S, tau)
    advantage = {int(r): float(a) for r, a in zip(np.asarray(train_rows).tolist(), np.asarray(advantages).tolist())}
    picked = pick_groups(rows, strata, rules, np.random.default_rng([int(cfg.seed), int(seed_key)]))
    return {"rollouts": rollout_records(rows, picked, advantage, strata, rules.text_chars),
            "histograms": step_histograms(rows, cfg.max_new_tokens)}
