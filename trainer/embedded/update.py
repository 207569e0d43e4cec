"""The policy update shared by every method: clipped surrogate on variable-size groups,
entropy bonus, optional k3 KL to a frozen reference, AdamW with warmup and grad clipping.

:class:`Updater` is built once per run from its config (:meth:`Updater.from_config`): the
model, its optimizer and LR schedule, the frozen reference, the loss settings
(:class:`UpdateSettings`) and the RNG that reshuffles the mini-batches each PPO epoch. The loop
calls ``updater.step(rollouts, advantages)`` once per training step.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from trainer.core.importance import importance_weights, weight_stats
from trainer.core.losses import Aggregation, clipped_surrogate, kl_k3
from trainer.embedded.forward import TrainBatch, collate, head_logprobs_and_entropy, lm_parts, sequence_logprobs
from trainer.embedded.model import is_gradient_checkpointing
from trainer.embedded.packing import PackedRows, pack_rows, packed_logprobs, packed_micro_batches, packs
from trainer.rollout.kv_cache import forward_kwargs, left_pad, output_cache
from trainer.rollout.base import Rollout

if TYPE_CHECKING:  # the config (pydantic) stays out of torch-only users (scripts/gpu_check.py)
    from trainer.spec.config import RunConfig

SHUFFLE_STREAM = 1
"""Second word of the mini-batch shuffle RNG's seed, ``(seed, SHUFFLE_STREAM)``: a stream of its
own, so shuffling never moves the curation RNG's draws (``default_rng(seed)``, which AERO's S3
and the verl engine share) nor the sampling generator's."""

STAT_KEYS = ("loss/policy", "loss/total", "train/entropy", "train/kl", "train/clip_frac", "train/approx_kl",
             "train/grad_norm")


def warmup_constant_lr(step: int, warmup: int) -> float:
    """LR multiplier: linear warmup over ``warmup`` optimizer steps, then constant (paper Table 9)."""
    return min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0


def warmup_length(total_steps: int, warmup_ratio: float, warmup_steps: int | None = None, per_step: int = 1) -> int:
    """Warmup in optimizer steps: ``warmup_steps`` training steps (``per_step`` optimizer steps
    each) when given, else ceil(warmup_ratio * total optimizer steps) (the paper's rule)."""
    return warmup_steps * per_step if warmup_steps is not None else math.ceil(warmup_ratio * total_steps)


def shares_prompts(model, rollouts: list[Rollout], batch: TrainBatch, against: int | None = None) -> bool:
    """Whether :func:`shared_prompt_logprobs` does fewer token forwards than the other pass:
    distinct prompts x their width + rows x (longest response - 1) against ``against`` tokens
    (default rows x T, the right-padded batch). Counted from the rollouts' lists, on the host.
    Not with activation checkpointing (HF turns the KV cache off under it)."""
    hf_model = hasattr(getattr(model, "config", None), "num_hidden_layers") and lm_parts(model) is not None
    if not rollouts or not hf_model or is_gradient_checkpointing(model):
        return False
    prompts = {tuple(r.prompt_ids) for r in rollouts}
    longest_resp = max(len(r.response_ids) for r in rollouts)
    shared = len(prompts) * max(len(p) for p in prompts) + len(rollouts) * max(longest_resp - 1, 0)
    return longest_resp > 0 and shared < (batch.input_ids.numel() if against is None else against)


def length_buckets(response_lengths: torch.Tensor, prompt_of_row: torch.Tensor, prompt_width: int,
                   min_saving: float = 0.15) -> list[torch.Tensor]:
    """Rows of the response pass in one bucket, or two split at a response length, when two
    passes cost at least ``min_saving`` fewer token forwards than one.

    The response pass is padded to its longest response, and one runaway row pads every row to
    it: on the tiny task the mean response is 3.7 tokens, a mini-batch's longest 5-12, so a
    padded pass spends ~1.6x its real tokens. Split at length c, short rows pay c - 1 positions
    and the long rows' prompts run a second time (their prompt pass: ``prompt_width`` tokens
    each); the best c is taken. Returns row-index tensors covering every row once."""
    q = response_lengths
    n, width = len(q), int(q.max()) if len(q) else 0
    one = [torch.arange(n, device=q.device)]
    if n < 2 or width < 3:
        return one
    whole = n * (width - 1)
    best, best_cost = None, whole * (1.0 - min_saving)
    for c in sorted(set(q.tolist()))[:-1]:
        long_rows = q > c
        cost = int((~long_rows).sum()) * max(c - 1, 0) + int(long_rows.sum()) * (width - 1) \
            + len(set(prompt_of_row[long_rows].tolist())) * prompt_width
        if cost <= best_cost:
            best, best_cost = c, cost
    if best is None:
        return one
    return [(q <= best).nonzero()[:, 0], (q > best).nonzero()[:, 0]]


def shared_prompt_logprobs(model, rollouts: list[Rollout], batch: TrainBatch, temperature: float, pad_id: int,
                           with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``sequence_logprobs`` computed once per distinct prompt instead of once per row.

    GRPO and AERO train n rollouts of each prompt, and a right-padded forward recomputes the
    prompt's activations n times; on the arithmetic task prompts are ~2/3 of every sequence.
    Here each distinct prompt runs once (left-padded, KV cache on, logits of its last position
    only), the cache is copied to its rows (``reorder_cache``: an index_select, whose backward
    sums the rows' gradients back into the prompt pass), and one pass over the responses
    (right-padded, fed all but their last token) continues from it, the same layout as the
    engine's prefill + decode. Rows whose responses are much shorter than the longest get a
    pass of their own (:func:`length_buckets`). Same outputs as ``sequence_logprobs`` ([N, T],
    zero off the response) up to float rounding: only the matmul shapes, hence summation order,
    differ."""
    dev = batch.input_ids.device
    slot: dict[tuple[int, ...], int] = {}
    prompt_of_row = torch.tensor([slot.setdefault(tuple(r.prompt_ids), len(slot)) for r in rollouts], dtype=torch.long)
    buckets = length_buckets(batch.response_lengths.cpu(), prompt_of_row, max(len(p) for p in slot))
    if len(buckets) == 1:
        return _prompt_then_responses(model, list(slot), prompt_of_row.to(dev), batch, temperature, pad_id, with_entropy)
    prompts, parts = list(slot), []
    for idx in buckets:
        used, rows = torch.unique(prompt_of_row[idx], return_inverse=True)  # this bucket's prompts, renumbered
        at = idx.to(dev)
        sub = replace(batch, input_ids=batch.input_ids[at], prompt_lengths=batch.prompt_lengths[at],
                      response_lengths=batch.response_lengths[at])
        parts.append(_prompt_then_responses(model, [prompts[p] for p in used.tolist()], rows.to(dev), sub, temperature,
                                            pad_id, with_entropy))
    back = torch.empty(len(rollouts), dtype=torch.long)  # row i's position in the concatenated buckets
    back[torch.cat(buckets)] = torch.arange(len(rollouts))
    back = back.to(dev)
    logp = torch.cat([lp for lp, _ in parts])[back]
    ent = torch.cat([e for _, e in parts])[back] if with_entropy else None
    return logp, ent


def _prompt_then_responses(model, prompts: list[tuple[int, ...]], rows: torch.Tensor, batch: TrainBatch,
                           temperature: float, pad_id: int, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One prompt pass over ``prompts`` and one response pass over the batch's rows (row i
    continues from prompt ``rows[i]``), placed in the batch's layout. The backbone's hidden
    states go through the LM head in chunks (``head_logprobs_and_entropy``): no full-vocab
    logits for the whole pass."""
    dev = batch.input_ids.device
    base, head = lm_parts(model)  # shares_prompts admits transformers causal LMs only
    ids, mask, pos = left_pad([list(p) for p in prompts], pad_id, dev)
    cache_kw, _ = forward_kwargs(model)
    out = base(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    hidden = out.last_hidden_state[:, -1:][rows]  # [N, 1, H]: predicts each row's first response token
    p_len, q_len = batch.prompt_lengths, batch.response_lengths
    width = int(q_len.max())
    j = torch.arange(width, device=dev)
    in_resp = j[None, :] < q_len[:, None]  # [N, width]
    resp = batch.input_ids.gather(1, (p_len[:, None] + j).clamp(max=batch.input_ids.shape[1] - 1))
    resp = resp.masked_fill(~in_resp, pad_id)
    if width > 1:
        cache = output_cache(out)
        cache.reorder_cache(rows)
        more = base(input_ids=resp[:, :-1], attention_mask=torch.cat([mask[rows], in_resp[:, :-1].long()], 1),
                    position_ids=pos[rows][:, -1:] + 1 + j[:-1], use_cache=True, **{cache_kw: cache}).last_hidden_state
        hidden = torch.cat([hidden, more], 1)
    logp, ent = head_logprobs_and_entropy(head, hidden, resp, in_resp, temperature, with_entropy)
    return _place(logp, in_resp, p_len, batch.input_ids.shape[1]), \
        (_place(ent, in_resp, p_len, batch.input_ids.shape[1]) if with_entropy else None)


def _place(values: torch.Tensor, keep: torch.Tensor, p_len: torch.Tensor, T: int) -> torch.Tensor:
    """Response-aligned [N, width] -> the batch's layout [N, T]: value j of row i goes to
    column p_len[i] + j; zero elsewhere (differentiable)."""
    N, width = values.shape
    idx = p_len[:, None] + torch.arange(width, device=values.device)
    out = torch.zeros((N, T + width), dtype=values.dtype, device=values.device)
    return out.scatter(1, idx, values * keep.to(values.dtype))[:, :T]


def policy_logprobs(model, rollouts: list[Rollout], batch: TrainBatch, temperature: float, pad_id: int,
                    with_entropy: bool = True, packed: PackedRows | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The update's forward: per distinct prompt when that is cheaper, else one packed pass over
    ``packed`` (the same rows laid end to end, trainer/embedded/packing.py) when given, else one
    padded pass. The cheaper is counted in token forwards against the pass it would replace."""
    against = packed.input_ids.shape[1] if packed is not None else None
    if shares_prompts(model, rollouts, batch, against):
        return shared_prompt_logprobs(model, rollouts, batch, temperature, pad_id, with_entropy)
    if packed is not None:
        return packed_logprobs(model, packed, temperature, with_entropy)
    return sequence_logprobs(model, batch, temperature, with_entropy)


@dataclass(frozen=True)
class UpdateSettings:
    """What the update's loss and optimizer steps read, fixed for a run.

    ``agg`` carries the loss aggregation's constants: for Dr.GRPO's 'seq-mean-token-sum-norm'
    the generation budget (``max_len = max_new_tokens``), never a mini-batch's padded width,
    which would make the normaliser change from mini-batch to mini-batch."""

    pad_id: int
    temperature: float
    eps_low: float
    eps_high: float
    agg: Aggregation
    entropy_coef: float = 0.0
    kl_coef: float = 0.0
    grad_clip: float = 1.0
    epochs: int = 1
    mini_batches: int = 1
    device: Any = "cpu"
    micro_batch_tokens: int = 0  # tokens of one forward (padded: rows x longest); 0 = the whole mini-batch at once
    packed: bool = False  # micro-batches packed into one row, no padding (trainer/embedded/packing.py)
    correction: str = "none"  # off-policy rows' importance weights (trainer/core/importance.py): none | tis | mis
    is_cap: float = 2.0  # their cap C

    @classmethod
    def from_config(cls, cfg: RunConfig, pad_id: int, device: Any = "cpu", micro_batch_tokens: int | None = None
                    ) -> UpdateSettings:
        """``micro_batch_tokens``: the budget the run's memory plan chose (trainer/embedded/
        memory_plan.py); default the config's own (0 = one forward per mini-batch)."""
        from trainer.methods.spec import get_method

        eps_low, eps_high = get_method(cfg.method).clip_range(cfg)  # DAPO: clip-higher
        return cls(pad_id=pad_id, temperature=cfg.temperature, eps_low=eps_low, eps_high=eps_high,
                   agg=Aggregation(cfg.effective_loss_agg, max_len=cfg.max_new_tokens),
                   entropy_coef=cfg.entropy_coef, kl_coef=cfg.kl_coef, grad_clip=cfg.optim.grad_clip,
                   epochs=cfg.ppo_epochs, mini_batches=cfg.mini_batches, device=device,
                   micro_batch_tokens=cfg.micro_batch_tokens if micro_batch_tokens is None else micro_batch_tokens,
                   packed=packs_update(cfg), correction=cfg.offpolicy.correction, is_cap=cfg.offpolicy.is_cap)


def packs_update(cfg: RunConfig) -> bool:
    """Whether the embedded update packs its micro-batches: ``packed_update`` "on". "auto" keeps
    the padded update here until packing is measured to be no slower on the engine's devices
    (docs/engines.md "Packed update"); the two give the same losses and gradients up to float
    rounding, not bit for bit."""
    return cfg.packed_update == "on"


def shuffle_rng(seed: int) -> np.random.Generator:
    """The run's mini-batch shuffle RNG (seeded; checkpointed with the run, see :data:`SHUFFLE_STREAM`)."""
    return np.random.default_rng((seed, SHUFFLE_STREAM))


def micro_batches(rows: list[Rollout], budget: int) -> list[list[int]]:
    """Split a mini-batch into micro-batches whose padded forward (rows x longest row) fits
    ``budget`` tokens: the token budget of verl's dynamic batch size
    (``ppo_max_token_len_per_gpu``), counted on right-padded rows.

    When the whole mini-batch fits (or ``budget`` is 0), one micro-batch in the rows' order: the
    update is then the one-pass update, bit for bit. Otherwise rows are sorted longest first
    and cut greedily, so each micro-batch holds rows of similar length and pads little; a row
    longer than the budget goes alone (the memory plan refuses such configs before any compute).
    The cut changes only the order of float sums: the loss is a sum over rows (see
    :func:`trainer.core.losses.aggregate`'s ``n_seqs`` / ``n_tokens``)."""
    lengths = [len(r.prompt_ids) + len(r.response_ids) for r in rows]
    if budget <= 0 or len(rows) * max(lengths, default=0) <= budget:
        return [list(range(len(rows)))]
    out: list[list[int]] = []
    for i in sorted(range(len(rows)), key=lambda i: -lengths[i]):
        # longest first: the micro-batch's first row sets its padded width
        if out and (len(out[-1]) + 1) * lengths[out[-1][0]] <= budget:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def mini_batch_indices(n_rows: int, mini_batches: int, rng: np.random.Generator | None) -> list[torch.Tensor]:
    """One PPO epoch's mini-batches: row indices split as ``torch.tensor_split`` does (never
    more mini-batches than rows), after a permutation drawn from ``rng``.

    Reshuffled each epoch (cleanrl's ppo.py) so a second epoch does not replay the first one's
    partition. With one mini-batch there is no partition to change: the rows stay in order and
    ``rng`` is not drawn from, so such runs are bit-identical to the unshuffled update."""
    k = max(1, min(mini_batches, n_rows))
    if k == 1 or rng is None:
        order = torch.arange(n_rows)
    else:
        order = torch.from_numpy(rng.permutation(n_rows))
    return list(order.tensor_split(k))


@dataclass
class Updater:
    """A run's policy update, built once (:meth:`from_config`) and stepped once per training step.

    The PPO ratio uses the engine's sampling log-probs as the behaviour policy (no extra
    forward); with 1 epoch and 1 mini-batch the ratio is 1 up to numerics. ``shuffle`` is
    the RNG mini-batches are reshuffled from (:func:`mini_batch_indices`); None keeps them in order."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any  # torch.optim.lr_scheduler.LRScheduler
    settings: UpdateSettings
    ref_model: torch.nn.Module | None = None
    shuffle: np.random.Generator | None = None

    @classmethod
    def from_config(cls, cfg: RunConfig, model: torch.nn.Module, pad_id: int, device: Any = "cpu",
                    micro_batch_tokens: int | None = None) -> Updater:
        """AdamW with linear warmup then a constant LR (paper Table 9), counted in optimizer
        steps (epochs x mini-batches per training step); a frozen copy of the initial model as
        the KL reference when ``kl_coef > 0``; ``micro_batch_tokens`` as the memory plan chose
        (default: the config's)."""
        ref_model = copy.deepcopy(model).eval().requires_grad_(False) if cfg.kl_coef > 0 else None
        # fused: one kernel for all parameters on CUDA (the foreach path launches several per step)
        fused = torch.device(device).type == "cuda"
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, betas=(cfg.optim.beta1, cfg.optim.beta2),
                                      weight_decay=cfg.optim.weight_decay, fused=fused or None)
        per_step = cfg.ppo_epochs * cfg.mini_batches
        warmup = warmup_length(cfg.steps * per_step, cfg.optim.warmup_ratio, cfg.optim.warmup_steps, per_step)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_constant_lr(s, warmup))
        return cls(model, optimizer, scheduler, UpdateSettings.from_config(cfg, pad_id, device, micro_batch_tokens),
                   ref_model, shuffle_rng(cfg.seed) if cfg.shuffle_mini_batches else None)

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    @property
    def extra_forwards(self) -> int:
        """Forward passes per trained token beyond the policy's own (the reference's), for FLOPs."""
        return 1 if self.ref_model is not None else 0

    def step(self, rollouts: list[Rollout], advantages: torch.Tensor) -> dict[str, float]:
        """One training step's update: ``epochs`` passes over the rows, each split into
        mini-batches (one optimizer step each), each mini-batch into micro-batches of at most
        ``micro_batch_tokens`` (gradient accumulation). The sequence means divide by rows /
        mini-batches in every mini-batch (``agg.n_seqs``), the layout and normaliser the verl
        engine uses too (trainer/verl/rows.py). Returns the mean stats over the optimizer steps;
        they stay on the device until the end of the step (one host sync, not one per step)."""
        s = self.settings
        self.model.train()
        k = max(1, min(s.mini_batches, len(rollouts)))
        agg = replace(s.agg, n_seqs=len(rollouts) / k)
        stats: list[torch.Tensor] = []
        for _ in range(s.epochs):
            for idx in mini_batch_indices(len(rollouts), s.mini_batches, self.shuffle):
                rows = [rollouts[i] for i in idx.tolist()]
                stats.append(self.mini_batch_step(rows, advantages[idx], agg))
        means = torch.stack(stats).mean(0).tolist()
        return dict(zip(STAT_KEYS, means))

    def with_proximal(self, rollouts: list[Rollout]) -> tuple[list[Rollout], dict[str, float]]:
        """Off-policy rows (sampled by an older version) with their log-probs under the weights
        the update starts from, the proximal policy of decoupled PPO (trainer/core/importance.py):
        one no-grad forward, micro-batched like the update. Returns the rows (copies) and the
        importance weights' token means (``offpolicy/is_weight_mean``, ``offpolicy/is_capped_frac``)."""
        s = self.settings
        out: list[Rollout] = [replace(r) for r in rollouts]
        self.model.train()  # the mode the update's forwards run in, so an on-policy ratio starts at 1
        with torch.no_grad():
            for part in self.micro_batches(out):
                sub = [out[i] for i in part]
                mb = collate(sub, s.pad_id).to(s.device, non_blocking=True)
                packed = pack_rows(sub).to(s.device) if self.packing() else None
                logp, _ = policy_logprobs(self.model, sub, mb, s.temperature, s.pad_id, with_entropy=False, packed=packed)
                for r, row, p in zip(sub, logp.float().cpu(), mb.prompt_lengths.tolist()):
                    r.proximal_logprobs = row[p:p + len(r.response_ids)].tolist()
        mb = collate(out, s.pad_id)
        stats = weight_stats(mb.old_logprobs, mb.behaviour_logprobs, mb.response_mask, s.is_cap)
        return out, {f"offpolicy/{k}": v for k, v in stats.items()}

    def mini_batch_step(self, rows: list[Rollout], advantages: torch.Tensor, agg: Aggregation) -> torch.Tensor:
        """Loss and backward per micro-batch (the gradients add up), then clip, one AdamW step
        and one LR-schedule step. Every micro-batch's loss is normalised by the whole
        mini-batch's rows (``agg.n_seqs``) and response tokens (``n_tokens``), so the summed
        gradient is the one-pass gradient. Returns the :data:`STAT_KEYS` values as one tensor."""
        s = self.settings
        n_tokens = float(sum(len(r.response_ids) for r in rows))
        agg = replace(agg, n_tokens=n_tokens)
        totals = torch.zeros(len(STAT_KEYS) - 1, device=s.device)  # sums of all but grad_norm
        for part in self.micro_batches(rows):
            sub = [rows[i] for i in part]
            values = self.micro_batch_loss(sub, advantages[part].to(s.device, non_blocking=True), agg)
            values[1].backward()  # [1] is the total loss
            share = sum(len(r.response_ids) for r in sub) / max(n_tokens, 1.0)
            # clip/approx-kl are token means, weighted by tokens; no host-made tensor: no copy to the device
            stacked = torch.stack([v.detach().float().reshape(()) for v in values])
            totals += torch.cat([stacked[:4], stacked[4:] * share])
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), s.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        # the gradients are freed now, not at the next step's backward: generation and
        # evaluation run between updates and need that memory (1.5B: 6 GB of fp32 gradients)
        self.optimizer.zero_grad(set_to_none=True)
        return torch.cat([totals, grad_norm.detach().float().reshape(1).to(totals.device)])

    def packing(self) -> bool:
        """Whether this update packs: asked for (``settings.packed``) and the model admits it."""
        return self.settings.packed and packs(self.model)

    def micro_batches(self, rows: list[Rollout]) -> list[list[int]]:
        """The mini-batch's micro-batches: at most ``micro_batch_tokens`` real tokens each when
        packed, rows x longest row when padded."""
        if self.packing():
            return packed_micro_batches([len(r.prompt_ids) + len(r.response_ids) for r in rows],
                                        self.settings.micro_batch_tokens)
        return micro_batches(rows, self.settings.micro_batch_tokens)

    def micro_batch_loss(self, rows: list[Rollout], advantages: torch.Tensor, agg: Aggregation) -> list[torch.Tensor]:
        """(policy loss, total loss, entropy, KL, clip fraction, approx KL) of one micro-batch:
        its share of the mini-batch's loss (``agg`` carries the mini-batch's normalisers), and
        its own token means of the clip fraction and approx KL. The loss reads the padded layout
        either way (a few [rows, T] floats); only the forward is packed."""
        s = self.settings
        mb = collate(rows, s.pad_id).to(s.device, non_blocking=True)
        packed = pack_rows(rows).to(s.device) if self.packing() else None
        logp, entropy = policy_logprobs(self.model, rows, mb, s.temperature, s.pad_id, packed=packed)
        weights = None
        if any(r.proximal_logprobs is not None for r in rows):  # stale rows: decoupled PPO (trainer/core/importance.py)
            weights, _ = importance_weights(mb.old_logprobs, mb.behaviour_logprobs, s.is_cap, s.correction)
        pg_loss, pg_stats = clipped_surrogate(logp, mb.old_logprobs, advantages, mb.response_mask,
                                              s.eps_low, s.eps_high, agg, weights=weights)
        ent = agg(entropy, mb.response_mask)
        loss = pg_loss - s.entropy_coef * ent
        kl = torch.zeros((), device=logp.device)
        if self.ref_model is not None and s.kl_coef > 0:
            with torch.no_grad():
                ref_logp, _ = policy_logprobs(self.ref_model, rows, mb, s.temperature, s.pad_id, with_entropy=False,
                                              packed=packed)
            kl = agg(kl_k3(logp, ref_logp), mb.response_mask)
            loss = loss + s.kl_coef * kl
        return [pg_loss, loss, ent, kl, pg_stats["clip_frac"], pg_stats["approx_kl"]]
