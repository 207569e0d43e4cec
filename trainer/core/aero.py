"""AERO: Adaptive Efficient Rollout Optimization (arXiv 2602.14338, Algorithm 1, §4.1-4.4).

Pure functions over numpy arrays (curation indices) and torch tensors (advantages); no model,
no I/O. The training loop drives one step as:

    1. explore   n_explore rollouts per prompt                         (§4.1)
    2. stratify  -> RESCUE / LOW / HIGH                                 (§4.1, §4.2.1)
    3. rescue    state = start_rescue(...); repeat
                     plan = plan_rounds(state, R, ...)   # R = aero.rounds_per_call
                     generate plan.sum(0)[p] rollouts for prompt p in one engine call
                     state, used = replay(state, plan, new_rewards)
                 until plan is empty                                    (§4.2.1, S1)
                 -> trainer/core/rescue.py (numpy only)
    4-5. curate  -> kept rollouts, group kind, posterior mean u~       (§4.2.2 S2, §4.2.3 S3)
    6. advantages = aero_advantages(...) then the GRPO clipped update.

Every open interpretation is a named argument (curation's: a :class:`CurationRules` field);
docs/algorithms.md lists them with defaults. Correctness (``is_correct``: reward > 0.5) and
Stage I's ``stratify`` / ``Stratum`` are every method's, in trainer/core/strata.py. This module
holds steps 4-6: curation (S1's rescued pairs, S2, S3) and the advantages, with Theorem 4.1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import torch
from torch import Tensor

from trainer.core.advantages import bayesian_advantage, grpo_advantage, posterior_mean
from trainer.core.strata import Stratum, is_correct

KINDS = ("rescued", "bayes", "low", "high", "zero")


# ---------------------------------------------------------------------------- curation (S1-S3)


@dataclass(frozen=True)
class Curated:
    """The training batch chosen from each prompt's rollouts.

    Attributes:
        kept: per prompt, sorted int indices into that prompt's rollout list. Never empty.
        kinds: per prompt, one of KINDS: 'rescued' (S1 group of 2), 'bayes' (S2 zero-variance
            group with posterior baseline), 'low' (low-success partial, S3 if on), 'high'
            (high-success partial, all kept), 'zero' (zero-variance group without S2: all
            rollouts kept, GRPO advantage 0).
        u_tilde: float[P] posterior mean for 'bayes' prompts, nan otherwise.
        correct: int[P] correct count c over all the prompt's rollouts.
        produced: int[P] number of rollouts n the prompt has.
    """

    kept: list[np.ndarray]
    kinds: list[str]
    u_tilde: np.ndarray
    correct: np.ndarray
    produced: np.ndarray

    @property
    def n_kept(self) -> np.ndarray:
        return np.array([len(k) for k in self.kept], dtype=np.int64)

    def flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prompt_idx int[N], rollout_idx int[N], group_ids int[N]); group id = prompt index,
        so ``kinds[g]`` and ``u_tilde[g]`` describe group g."""
        if not self.kept:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty.copy(), empty.copy()
        prompt = np.concatenate([np.full(len(k), p, dtype=np.int64) for p, k in enumerate(self.kept)])
        idx = np.concatenate(self.kept).astype(np.int64)
        return prompt, idx, prompt.copy()


def _pick(pool: np.ndarray, m: int, rule: str, lengths, rng) -> np.ndarray:
    """Choose m indices from ``pool`` (ascending generation order) by ``rule``."""
    m = min(int(m), len(pool))
    if m <= 0:
        return np.zeros(0, dtype=np.int64)
    if rule == "first":
        return pool[:m]
    if rule == "random":
        if rng is None:
            raise ValueError("random selection needs rng (a seeded numpy Generator)")
        return np.sort(rng.choice(pool, size=m, replace=False))
    if rule in ("longest", "shortest"):
        if lengths is None:
            raise ValueError(f"selection {rule!r} needs lengths_by_prompt")
        key = np.asarray(lengths)[pool]
        order = np.argsort(-key if rule == "longest" else key, kind="stable")  # ties: generation order
        return pool[order[:m]]
    raise ValueError(f"unknown selection rule {rule!r}")


def negatives_to_keep(c: int, n_incorrect: int, k: float) -> int:
    """S3 negative count m = min(floor(k * c), #incorrect) (§4.2.3). A 1e-9 slack keeps e.g.
    k = 1.15, c = 20 at 23 despite 1.15 * 20 = 22.999... in floating point."""
    return min(math.floor(k * c + 1e-9), n_incorrect)


class CurationSection(Protocol):
    """What :meth:`CurationRules.from_config` reads of a run's ``aero`` config section
    (trainer.methods.aero.AEROConfig); a protocol, so the core imports no config module.
    The selection rules are read-only properties so the section's Literal types fit."""

    n_explore: int
    alpha0: float
    beta0: float
    k: float
    zero_variance_keep: int

    @property
    def negative_selection(self) -> str: ...
    @property
    def rescue_negative(self) -> str: ...
    @property
    def zero_variance_selection(self) -> str: ...


class StrategySwitches(Protocol):
    """What :meth:`CurationRules.from_config` reads of a method's S1/S2/S3 switches
    (``MethodSpec.aero``, trainer.methods.aero_strategies.AeroStrategies); a protocol, so the
    core imports no method module. Read-only, so the frozen dataclass fits."""

    @property
    def s1(self) -> bool: ...
    @property
    def s2(self) -> bool: ...
    @property
    def s3(self) -> bool: ...


@dataclass(frozen=True)
class CurationRules:
    """How :func:`curate` chooses the training groups: the strategy switches and AERO's curation
    hyper-parameters (Algorithm 1 curation; §4.2.1-4.2.3, §4.4; docs/algorithms.md §4 step 4).
    The defaults are full AERO with the paper's values.

    Attributes:
        s1: S1 adaptive rescue (§4.2.1) ran this step; with ``s1=False`` ``rescued_at`` must be
            all -1.
        s2: S2 Bayesian zero-variance groups (§4.2.2): keep ``zero_variance_keep`` rollouts with
            the Beta-posterior baseline u~; off: keep all, GRPO advantage 0.
        s3: S3 rejection sampling of negatives in low-success groups (§4.2.3); off: keep all.
        n_explore: Stage I exploration rollouts per prompt (§4.1); a rescue rollout sits at an
            index >= n_explore.
        alpha0: Beta prior alpha of S2's baseline u~ = (c + alpha0) / (n + alpha0 + beta0) (eq. 6).
        beta0: Beta prior beta of that baseline.
        k: S3 negatives per positive, m = min(floor(k c), #incorrect) (§4.2.3; Thm 4.1 optimum 1).
        zero_variance_keep: rollouts an S2 zero-variance group keeps (§4.4: 4).
        negative_selection: which incorrect rollouts S3 keeps: 'random' (uniform without
            replacement), 'first' (generation order), 'longest' / 'shortest' (response length,
            ties in generation order). The paper's 'top-m most informative' is undefined.
        rescue_negative: which incorrect rollout joins the first correct rescue rollout in a
            rescued group of 2: 'first' (earliest) or 'random'.
        zero_variance_selection: which rollouts an S2 zero-variance group keeps: 'first' or
            'random'.
    """

    s1: bool = True
    s2: bool = True
    s3: bool = True
    n_explore: int = 8
    alpha0: float = 1.0
    beta0: float = 1.0
    k: float = 1.0
    zero_variance_keep: int = 4
    negative_selection: str = "random"
    rescue_negative: str = "first"
    zero_variance_selection: str = "first"

    @classmethod
    def from_config(cls, aero: CurationSection, strategies: StrategySwitches,
                    n_explore: int | None = None) -> CurationRules:
        """The rules of a run: its ``aero`` config section and its method's S1/S2/S3 switches
        (``MethodSpec.aero``, trainer/methods/aero_strategies.py). ``n_explore`` overrides
        ``aero.n_explore`` (aero-mem explores some prompts with fewer rollouts)."""
        return cls(s1=strategies.s1, s2=strategies.s2, s3=strategies.s3,
                   n_explore=aero.n_explore if n_explore is None else int(n_explore),
                   alpha0=aero.alpha0, beta0=aero.beta0, k=aero.k, zero_variance_keep=aero.zero_variance_keep,
                   negative_selection=aero.negative_selection, rescue_negative=aero.rescue_negative,
                   zero_variance_selection=aero.zero_variance_selection)


AERO_CURATION = CurationRules()  # full AERO, the paper's defaults


def curate(
    rewards_by_prompt: Sequence,
    strata,
    rescued_at,
    rules: CurationRules = AERO_CURATION,
    *,
    lengths_by_prompt: Sequence | None = None,
    rng: np.random.Generator | None = None,
) -> Curated:
    """Choose each prompt's training group (Algorithm 1 curation; §4.2.1-4.2.3, §4.4; docs/algorithms.md §4 step 4).

    Rules, in order, for prompt p with n rollouts (explore first, then used rescue rollouts)
    of which c are correct:
    1. Rescued (S1, rescued_at_p >= 0): keep the first correct rescue rollout and one incorrect
       rollout generated before it, chosen by ``rescue_negative`` ('first' = earliest; 'random'),
       a group of 2 -> kind 'rescued'. With S > 0 the explore-phase correct rollouts are dropped.
    2. Zero-variance (c = 0 or c = n: unrescued all-fail, all-correct):
       S2 on: keep min(zero_variance_keep, n) chosen by ``zero_variance_selection``, baseline
       u~ = (c + alpha0) / (n + alpha0 + beta0) with c, n over *all* n rollouts the prompt
       produced this step (explore + rescue) -> kind 'bayes'.
       S2 off: keep all n, GRPO advantage 0 as in GRPO -> kind 'zero'.
    3. High-success partial (stratum HIGH, 0 < c < n): keep all -> 'high' (paper §B.3.4).
    4. Otherwise low-success partial -> 'low': S3 on: all c correct plus
       m = min(floor(k c), n - c) incorrect chosen by ``negative_selection``
       ('random': uniform without replacement from rng; 'first': generation order; 'longest' /
       'shortest': by response length, ties in generation order); S3 off: keep all.
       This includes a rescue-set prompt with 0 < c <= S (possible when S > 0) that was never
       rescued: it already has non-zero variance, so it is treated as low-success partial.

    Ablations: aero-s1 = (s1, no s2, no s3); aero-s1s2 = (s1, s2, no s3). With ``s1=False``
    ``rescued_at`` must be all -1 (no rescue ran).

    Args:
        rewards_by_prompt: length-P sequence of float[n_p] rewards, generation order.
        strata: int[P] from :func:`trainer.core.strata.stratify`.
        rescued_at: int[P] from :class:`trainer.core.rescue.RescueState` ``rescued_at`` (-1 = not rescued).
        rules: the strategy switches s1-s3 and the hyper-parameters named above
            (:class:`CurationRules`; default: full AERO, paper values).
        lengths_by_prompt: length-P sequence of int[n_p] response lengths (for longest/shortest).
        rng: numpy Generator for 'random' rules; draws happen in prompt order.
    """
    s1, s2, s3, n_explore, k = rules.s1, rules.s2, rules.s3, rules.n_explore, rules.k
    strata = np.asarray(strata, dtype=np.int64)
    rescued_at = np.asarray(rescued_at, dtype=np.int64)
    P = len(rewards_by_prompt)
    if len(strata) != P or len(rescued_at) != P:
        raise ValueError("rewards_by_prompt, strata and rescued_at must have one entry per prompt")
    if not s1 and (rescued_at >= 0).any():
        raise ValueError("rescued_at must be all -1 when S1 is off")
    kept, kinds = [], []
    u_tilde = np.full(P, np.nan)
    correct = np.zeros(P, dtype=np.int64)
    produced = np.zeros(P, dtype=np.int64)
    for p in range(P):
        ok = is_correct(rewards_by_prompt[p]).reshape(-1)
        n, c = len(ok), int(ok.sum())
        correct[p], produced[p] = c, n
        lengths = None if lengths_by_prompt is None else lengths_by_prompt[p]
        pos = int(rescued_at[p])
        if pos >= 0:
            if pos < n_explore or pos >= n or not ok[pos]:
                raise ValueError(f"prompt {p}: rescued_at={pos} is not a correct rescue rollout")
            neg = _pick(np.flatnonzero(~ok[:pos]), 1, rules.rescue_negative, lengths, rng)
            kept.append(np.sort(np.append(neg, pos)))
            kinds.append("rescued")
        elif c == 0 or c == n:
            if s2:
                zv = _pick(np.arange(n), rules.zero_variance_keep, rules.zero_variance_selection, lengths, rng)
                kept.append(np.sort(zv))
                kinds.append("bayes")
                u_tilde[p] = posterior_mean(c, n, rules.alpha0, rules.beta0)
            else:
                kept.append(np.arange(n))
                kinds.append("zero")
        elif strata[p] == Stratum.HIGH:
            kept.append(np.arange(n))
            kinds.append("high")
        else:
            if s3:
                m = negatives_to_keep(c, n - c, k)
                neg = _pick(np.flatnonzero(~ok), m, rules.negative_selection, lengths, rng)
                kept.append(np.sort(np.concatenate([np.flatnonzero(ok), neg])))
            else:
                kept.append(np.arange(n))
            kinds.append("low")
    return Curated(kept=[k_.astype(np.int64) for k_ in kept], kinds=kinds, u_tilde=u_tilde, correct=correct, produced=produced)


# ---------------------------------------------------------------------------- advantages (step 6)


def aero_advantages(
    rewards_kept: Tensor,
    group_ids: Tensor,
    kinds: Sequence[str],
    u_tilde,
    eps: float = 1e-6,
    unbiased: bool = True,
    normalize_std: bool = True,
) -> Tensor:
    """AERO advantages over the curated batch (docs/algorithms.md §4 step 5).

        'bayes' groups:  A_i = (r_i - u~_g) / sqrt(u~_g (1 - u~_g))     (S2, §4.2.2; no group norm)
        other groups:    A_i = (r_i - mean_g) / (std_g + eps)           (GRPO over the curated group)

    With ``normalize_std=False`` (Dr.GRPO) the other groups use r - mean and, by the same logic
    of dropping the scale, 'bayes' groups use r - u~ (an interpretation; documented).

    Args:
        rewards_kept: Tensor[N] rewards of the kept rollouts.
        group_ids: LongTensor[N] in [0, G), indexing ``kinds`` and ``u_tilde``.
        kinds: length-G group kinds (Curated.kinds).
        u_tilde: float[G] (Curated.u_tilde; nan for non-bayes groups).
    Returns:
        Tensor[N].
    """
    r = rewards_kept if torch.is_floating_point(rewards_kept) else rewards_kept.to(torch.float32)
    adv = grpo_advantage(r, group_ids, eps=eps, unbiased=unbiased, normalize_std=normalize_std)
    is_bayes_group = torch.tensor([kd == "bayes" for kd in kinds], dtype=torch.bool, device=r.device)
    if r.numel() == 0 or not bool(is_bayes_group.any()):
        return adv
    is_b = is_bayes_group[group_ids]
    u = torch.as_tensor(np.asarray(u_tilde, dtype=np.float64), device=r.device).to(r.dtype)[group_ids]
    u = torch.where(is_b, u, torch.full_like(u, 0.5))  # non-bayes rows: any valid value, discarded
    bayes = bayesian_advantage(r, u) if normalize_std else r - u
    return torch.where(is_b, bayes, adv)


def theorem41_factor(c, m):
    """Balance term of Theorem 4.1 (§4.3): ||G||^2 <= c m / (c + m)^2 * E||v_C - v_F||^2.

    For fixed c it is maximised at m = c (Lemma 4.2, value 1/4), i.e. k = 1. Elementwise on
    numbers or arrays; 0 when c + m = 0.
    """
    c = np.asarray(c, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    s = c + m
    out = np.divide(c * m, s * s, out=np.zeros(np.broadcast(c, m).shape), where=s > 0)
    return out if out.ndim else float(out)
