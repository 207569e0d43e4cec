"""One step's rollouts on verl, per method: AERO (explore, rescue rounds, curation) and DAPO
(group filtering). Mirrors trainer/collect.py for the embedded engine, on DataProto batches.

The AERO math is the shared core's: stratify, start_rescue/plan_rounds/replay, curate
(trainer.core.aero). ``generate`` is the rollout call (the trainer passes its
AgentLoopManager's ``generate_sequences``); every call here happens before the trainer puts
the rollout replicas to sleep.

Row bookkeeping: every generated row gets a global id in generation order (explore rows
first, then each rescue call's rows). ``rows_of[p]`` lists the ids of prompt p's rollouts
that count (explore, then the used rescue rollouts in round order), so ``curate`` sees exactly
what the embedded collector sees, and the selected ids pick the training rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from trainer.collect import strata_stats  # the embedded collector's strata metrics, shared
from trainer.config import RunConfig
from trainer.core.aero import Stratum, curate, plan_rounds, replay, start_rescue, stratify
from trainer.core.dapo import nonzero_variance_mask
from trainer.verl.rows import GenCount, generate_rows, response_lengths, row_correct


@dataclass
class VerlCollected:
    """A step's training rows (no padding yet) and its accounting.

    generated: every generated row (real requests), in generation order; train: the rows to
    train on; stats: platform metrics (strata, rescue, groups, dapo/*); ledger: AERO's
    per-prompt facts for the savings waterfall (None for other methods)."""

    train: object
    generated: object
    prompts_used: int
    gen: GenCount
    stats: dict[str, float] = field(default_factory=dict)
    ledger: dict | None = None


def _union(batch, prompt_of_row: np.ndarray, out):
    """The prompt-side columns of ``batch`` repeated per generated row, joined with the outputs."""
    return batch.select_idxs(np.asarray(prompt_of_row, dtype=np.int64)).union(out)


def collect_aero(cfg: RunConfig, batch, gen_batch, generate: Callable, divisor: int,
                 rng: np.random.Generator) -> VerlCollected:
    """AERO (Algorithm 1) on one prompt batch of P rows (``batch`` keeps the reward columns and
    uid, ``gen_batch`` the generation inputs, as verl's ``_get_gen_batch`` splits them).

    Exploration is one call of P * n_explore rows; each rescue call generates
    ``plan_rounds(state, aero.rounds_per_call)`` rounds for the active prompts (prompt-major,
    rounds in order within a prompt) padded to ``divisor``; ``replay`` accounts them. Returns
    the curated rows with ``reward_baselines`` (u~ on Bayesian groups, NaN elsewhere)."""
    from verl import DataProto

    a, P = cfg.aero, len(batch)
    s1, s2, s3 = cfg.strategies
    count = GenCount()
    explore_idx = np.repeat(np.arange(P), a.n_explore)
    chunks = [_union(batch, explore_idx, generate_rows(generate, gen_batch, explore_idx, divisor, count))]
    ok = row_correct(chunks[0])
    rows_of = [list(range(p * a.n_explore, (p + 1) * a.n_explore)) for p in range(P)]
    correct = np.array([ok[r].sum() for r in rows_of], dtype=np.int64)
    strata = stratify(correct, a.n_explore, a.S, a.tau)
    state = start_rescue(strata if s1 else np.full(P, int(Stratum.HIGH)), a.n_explore, cfg.n_total, P)
    n_rows, ok_all = len(explore_idx), [ok]
    while s1:
        plan = plan_rounds(state, a.rounds_per_call, delta_n=a.delta_n, n_max=a.n_max, k_max=a.k_max,
                           split=a.budget_split)
        if len(plan) == 0:
            break
        idx = np.repeat(np.arange(P), plan.sum(0))
        out = _union(batch, idx, generate_rows(generate, gen_batch, idx, divisor, count))
        ok_new = row_correct(out)
        ids = n_rows + np.arange(len(idx))
        state, used = replay(state, plan, [ok_new[idx == p].astype(np.float64) for p in range(P)])
        for p in range(P):
            rows_of[p] += ids[idx == p][used[p]].tolist()
        chunks.append(out)
        ok_all.append(ok_new)
        n_rows += len(idx)
    generated = DataProto.concat(chunks) if len(chunks) > 1 else chunks[0]
    ok_all = np.concatenate(ok_all)
    lengths = response_lengths(generated)
    cur = curate([ok_all[r].astype(np.float64) for r in rows_of], strata, state.rescued_at, s1=s1, s2=s2, s3=s3,
                 n_explore=a.n_explore, alpha0=a.alpha0, beta0=a.beta0, k=a.k, zero_variance_keep=a.zero_variance_keep,
                 negative_selection=a.negative_selection, rescue_negative=a.rescue_negative,
                 zero_variance_selection=a.zero_variance_selection, lengths_by_prompt=[lengths[r] for r in rows_of],
                 rng=rng)
    prompt_idx, pos, _ = cur.flat()
    selected = np.array([rows_of[p][i] for p, i in zip(prompt_idx.tolist(), pos.tolist())], dtype=np.int64)
    train = generated.select_idxs(selected)
    import torch

    train.batch["reward_baselines"] = torch.as_tensor(cur.u_tilde[prompt_idx], dtype=torch.float32)
    seq_tokens = generated.batch["attention_mask"].sum(-1).float().cpu().numpy()
    stats = strata_stats(correct, a.n_explore, cfg)
    stats.update({
        "zero_acc/after_rescue": float((cur.correct == 0).mean()),
        "rescue/rescued": float(state.rescued.sum()), "rescue/rounds": float(state.rounds_used),
        "rescue/calls": float(count.calls - 1), "rescue/generated": float(n_rows - len(explore_idx)),
        "rescue/unused": float(state.unused),
        **{f"groups/{kind}": float(cur.kinds.count(kind)) for kind in ("rescued", "bayes", "low", "high", "zero")},
    })
    ledger = dict(strata=strata, rescued=np.array([k == "rescued" for k in cur.kinds]), produced=cur.produced,
                  correct=cur.correct, mean_tokens=np.array([seq_tokens[r].mean() for r in rows_of]))
    return VerlCollected(train=train, generated=generated, prompts_used=P, gen=count, stats=stats, ledger=ledger)


def collect_dapo(cfg: RunConfig, next_batch: Callable, generate: Callable, divisor: int) -> VerlCollected:
    """DAPO dynamic sampling (the DAPO recipe's group filtering, with the shared core's filter):
    generate n_total per prompt for prompt batches from ``next_batch()`` -> (batch, gen_batch)
    until P groups with non-zero accuracy variance are kept or ``dapo.max_gen_rounds`` batches
    were generated; then train on the kept groups (possibly fewer than P, counted in
    dapo/cap_hit) instead of raising as the recipe does. Without dynamic sampling it is GRPO's
    collection with DAPO's loss settings."""
    from verl import DataProto

    d, P, n = cfg.dapo, cfg.batch_prompts, cfg.n_total
    count, kept, generated = GenCount(), [], []
    first_correct, rounds, used, n_kept = None, 0, 0, 0
    while rounds < d.max_gen_rounds and n_kept < P:
        batch, gen_batch = next_batch()
        Pb = len(batch)
        idx = np.repeat(np.arange(Pb), n)
        out = _union(batch, idx, generate_rows(generate, gen_batch, idx, divisor, count))
        generated.append(out)
        ok = row_correct(out)
        if first_correct is None:
            first_correct = ok.reshape(Pb, n).sum(1)
        keep = (nonzero_variance_mask(_t(ok), _t(idx)).numpy() if d.dynamic_sampling
                else np.ones(len(idx), dtype=bool))
        groups = [p for p in range(Pb) if keep[p * n]][: P - n_kept]
        if groups:
            kept.append(out.select_idxs(np.concatenate([np.arange(p * n, (p + 1) * n) for p in groups])))
        n_kept += len(groups)
        rounds += 1
        used += Pb
    stats = strata_stats(first_correct, n, cfg)
    stats["zero_acc/after_rescue"] = stats["zero_acc/after_explore"]
    stats.update({"dapo/gen_rounds": float(rounds), "dapo/kept_groups": float(n_kept), "dapo/cap_hit": float(n_kept < P)})
    train = DataProto.concat(kept) if kept else None
    return VerlCollected(train=train, generated=DataProto.concat(generated), prompts_used=used, gen=count, stats=stats)


def _t(x: np.ndarray):
    import torch

    return torch.as_tensor(np.asarray(x, dtype=np.float64 if x.dtype == bool else x.dtype))
