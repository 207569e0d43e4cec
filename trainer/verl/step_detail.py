"""A verl step's stored detail (trainer/platform/step_detail.py): its generated DataProto described as
``StepRows`` (texts decoded with the trainer's tokenizer, only for the rows sampled), for the
curated loop (AERO, DAPO: every generation round, with the rows curated out) and for the stock
fit (GRPO, Dr.GRPO: one round, every row trained). The same sample rule and histograms as the
embedded engine's; verl's own generation logger is not needed for it."""

from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np

from trainer.platform.step_detail import SampleRules, StepRows, step_detail
from trainer.verl.rows import response_lengths, row_correct

log = logging.getLogger(__name__)


def best_effort(build: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any] | None:
    """``build(*args)``, or None (logged) if it fails: the sample is a view of the step, and a
    batch without a column it reads must not fail the training step."""
    try:
        return build(*args)
    except Exception:  # noqa: BLE001 - see the docstring
        log.warning("the step's rollout sample could not be built", exc_info=True)
        return None


def row_rewards(out) -> np.ndarray:
    """float[B] outcome reward: rm_scores (the reward loop's) or token_level_scores (the stock
    fit's), summed over the response."""
    key = "rm_scores" if "rm_scores" in out.batch.keys() else "token_level_scores"
    return out.batch[key].sum(-1).float().cpu().numpy()


def verl_rows(out, groups: np.ndarray, rounds: np.ndarray, tokenizer, max_new_tokens: int, step: int) -> StepRows:
    """StepRows of step ``step``'s generated DataProto (``prompts`` left-padded, ``responses``
    right-padded, ``attention_mask`` over both); ``groups``/``rounds`` per row, in row order. verl
    trains synchronously here: every row was sampled by version ``step - 1``."""
    lengths = response_lengths(out)
    prompts, responses = out.batch["prompts"], out.batch["responses"]
    prompt_mask = out.batch["attention_mask"][:, :prompts.shape[1]].bool()

    def prompt_text(i: int) -> str:
        return tokenizer.decode(prompts[i][prompt_mask[i]].tolist(), skip_special_tokens=True)

    def response_text(i: int) -> str:
        return tokenizer.decode(responses[i][:int(lengths[i])].tolist(), skip_special_tokens=True)

    return StepRows(group=np.asarray(groups, dtype=np.int64), round_=np.asarray(rounds, dtype=np.int64),
                    reward=row_rewards(out), correct=row_correct(out), length=lengths,
                    truncated=lengths >= max_new_tokens, prompt_text=prompt_text, response_text=response_text,
                    version=np.full(len(lengths), step - 1, dtype=np.int64))


def curated_detail(col, cfg, tokenizer, rules: SampleRules, step: int) -> dict[str, Any]:
    """The detail of a curated step (trainer/verl/collect.py's ``VerlCollected``)."""
    rows = verl_rows(col.generated, col.groups, col.rounds, tokenizer, cfg.max_new_tokens, step)
    return step_detail(rows, col.train_rows, col.advantages, cfg=cfg, rules=rules, seed_key=step)


def sequence_advantages(batch) -> np.ndarray:
    """float[B]: each row's advantage (the token-level advantages averaged over its response mask;
    GRPO's are constant along a response)."""
    mask = batch.batch["response_mask"].float()
    adv = (batch.batch["advantages"].float() * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return adv.cpu().numpy()


def stock_detail(batch, cfg, tokenizer, rules: SampleRules, step: int) -> dict[str, Any]:
    """The detail of a stock-fit step: the batch verl trains (every generated row; groups by uid)."""
    uids = batch.non_tensor_batch["uid"]
    index = {u: g for g, u in enumerate(dict.fromkeys(uids.tolist()))}
    groups = np.array([index[u] for u in uids.tolist()], dtype=np.int64)
    rows = verl_rows(batch, groups, np.zeros(len(groups), dtype=np.int64), tokenizer, cfg.max_new_tokens, step)
    return step_detail(rows, np.arange(len(groups)), sequence_advantages(batch), cfg=cfg, rules=rules, seed_key=step)
