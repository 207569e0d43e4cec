"""The packed update (trainer/embedded/packing.py, packed_attention.py): a micro-batch's rows laid
end to end in one row give the padded forward's log-probs, entropies and gradients, no token
attends across rows, and ``Updater.step`` with ``packed`` gives today's padded update's losses,
stats and gradients (float32, rtol 1e-5) for every method and every loss aggregation, across
micro-batch boundaries. ``packed_update`` means one thing on both engines."""

import copy
from dataclasses import replace

import pytest
import torch

from trainer.spec.config import ConfigError, parse_run_config
from trainer.core.losses import AGG_MODES
from trainer.embedded.forward import collate, sequence_logprobs
from trainer.embedded.model import build_model, enable_gradient_checkpointing, tiny_qwen2_config
from trainer.embedded.packed_attention import attention_plan, length_classes
from trainer.embedded.packing import pack_rows, packed_logprobs, packed_micro_batches, packs
from trainer.embedded.update import UpdateSettings, Updater
from trainer.methods.spec import method_names
from trainer.rollout.base import Rollout
from trainer.verl.overrides import to_overrides

V, BOS, EOS, PAD = 20, 1, 2, 0
# (prompt, response) lengths: very different, one row (3 + 20) far longer than the rest, prompts
# shared by several rows as GRPO's groups are
SHAPES = [(2, 9), (2, 1), (7, 4), (7, 2), (1, 1), (3, 20), (3, 5), (3, 3), (2, 6)]
# float32 tolerances: the packed and padded passes differ only in summation order (matmul shapes,
# the attention's batching). Values: rtol 1e-5 elementwise. Gradients: 1e-5 of each tensor's largest
# entry (a gradient entry near zero is a sum of terms that cancel, so its own rounding does not
# shrink with it). Measured worst cases (every method x mode, KL on and off, one and
# several micro-batches): 7.6e-7 relative on the losses, 1.2e-6 of a tensor's largest entry on the
# gradients.
RTOL, ATOL = 1e-5, 1e-6


def assert_close(a: torch.Tensor, b: torch.Tensor) -> None:
    """|a - b| <= RTOL x max |b| everywhere (plus float32's resolution at 1, for all-zero b)."""
    worst = float((a - b).abs().max())
    assert worst <= RTOL * float(b.abs().max()) + 1e-7, (worst, float(b.abs().max()))


def small_model(attn="eager", kv_heads=2, seed=0):
    cfg = tiny_qwen2_config(V, BOS, EOS, PAD, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            num_key_value_heads=kv_heads, intermediate_size=64)
    cfg._attn_implementation = attn
    return build_model(cfg, seed=seed)


def rows_of(shapes=SHAPES, seed=0):
    """Rollouts of the given (prompt, response) lengths, random tokens; rows with the same prompt
    length share one prompt."""
    g = torch.Generator().manual_seed(seed)
    prompts = {p: [BOS] + torch.randint(3, V, (p - 1,), generator=g).tolist() for p, _ in shapes}
    out = []
    for i, (p, q) in enumerate(shapes):
        resp = torch.randint(3, V, (q,), generator=g).tolist()
        out.append(Rollout(p, prompts[p], resp, (-2.0 + 0.3 * torch.randn(q, generator=g)).tolist(), i % 2 == 0))
    return out


def test_packed_micro_batches_hold_the_budget_in_real_tokens():
    lengths = [11, 2, 7, 4, 12]
    assert packed_micro_batches(lengths, 0) == [[0, 1, 2, 3, 4]]  # no budget: one pass, rows in order
    assert packed_micro_batches(lengths, 36) == [[0, 1, 2, 3, 4]]  # all fit: one pass, rows in order
    parts = packed_micro_batches(lengths, 14)
    assert sorted(i for p in parts for i in p) == list(range(5))
    assert parts == [[4, 1], [0], [2, 3]]  # first fit, longest first: 12 + 2, 11, 7 + 4
    assert all(sum(lengths[i] for i in p) <= 14 for p in parts)
    assert packed_micro_batches(lengths, 6) == [[4], [0], [2], [3, 1]]  # rows past the budget go alone


def test_the_attention_plan_groups_sequences_by_length_class():
    lengths = [3, 4, 1, 9, 2]  # classes (n - 1).bit_length(): 2, 2, 0, 4, 1
    assert length_classes(lengths) == [[3], [0, 1], [4], [2]]
    plan = attention_plan(lengths)
    assert [tuple(g.gather.shape) for g in plan.groups] == [(1, 9), (2, 4), (1, 2), (1, 1)]
    # the class of lengths 3 and 4 (starts 0 and 3): slots past a sequence's end repeat its last token
    assert plan.groups[1].gather.tolist() == [[0, 1, 2, 2], [3, 4, 5, 6]]
    assert plan.groups[1].valid.tolist() == [0, 1, 2, 4, 5, 6, 7]
    order = torch.cat([g.gather.flatten()[g.valid] for g in plan.groups])
    assert torch.equal(order[plan.restore], torch.arange(sum(lengths)))  # restore undoes the grouping
    assert plan.cu_seqlens.tolist() == [0, 3, 7, 8, 17, 19] and plan.max_len == 9
    with pytest.raises(ValueError):
        attention_plan([3, 0])


def test_pack_rows_lays_rows_end_to_end():
    rows = [Rollout(0, [BOS, 5], [6, 7], [-1.0, -2.0], True), Rollout(1, [BOS], [8], [-3.0], True)]
    p = pack_rows(rows)
    assert p.input_ids.tolist() == [[BOS, 5, 6, 7, BOS, 8]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 0, 1]]  # restarting per row
    assert p.predict.tolist() == [1, 2, 4] and p.targets.tolist() == [6, 7, 8]
    assert p.place.tolist() == [[3, 3, 0, 1], [3, 2, 3, 3]]  # collate's layout; 3 = the zero slot
    with pytest.raises(ValueError):
        pack_rows([Rollout(0, [], [6], [-1.0], True)])


@pytest.mark.parametrize("attn,kv_heads,checkpointing", [("eager", 2, False), ("sdpa", 1, False), ("sdpa", 2, True)])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_packed_forward_matches_the_padded_forward(attn, kv_heads, checkpointing, temperature):
    model = small_model(attn, kv_heads).train()
    if checkpointing:  # backward recomputes each layer: the plan travels with it
        enable_gradient_checkpointing(model)
    rows = rows_of()
    batch = collate(rows, PAD)
    params = list(model.parameters())
    w = torch.randn(batch.input_ids.shape, generator=torch.Generator().manual_seed(1))
    ref_logp, ref_ent = sequence_logprobs(model, batch, temperature)
    ref_grad = torch.autograd.grad(((ref_logp + 0.1 * ref_ent) * w).sum(), params)
    assert packs(model)
    logp, ent = packed_logprobs(model, pack_rows(rows), temperature)
    grad = torch.autograd.grad(((logp + 0.1 * ent) * w).sum(), params)
    assert logp.shape == ent.shape == batch.input_ids.shape
    mask = batch.response_mask.bool()
    assert torch.all(logp[~mask] == 0) and torch.all(ent[~mask] == 0) and torch.all(logp[mask] < 0)
    assert torch.allclose(logp, ref_logp, rtol=RTOL, atol=ATOL) and torch.allclose(ent, ref_ent, rtol=RTOL, atol=ATOL)
    for g, r in zip(grad, ref_grad):
        assert_close(g, r)
    # the model keeps serving unpacked calls as before: the padded pass, once it is installed
    again, _ = sequence_logprobs(model, batch, temperature)
    assert torch.allclose(again, ref_logp, rtol=RTOL, atol=ATOL)
    no_ent, none = packed_logprobs(model, pack_rows(rows), temperature, with_entropy=False)
    assert none is None and torch.allclose(no_ent, logp.detach(), atol=1e-6)


def test_no_token_attends_across_rows():
    """Changing every token of one row leaves every other row's log-probs exactly as they were
    (a leak would move them), and a row packed alone is the row packed with others."""
    model = small_model("sdpa", 1).eval()
    rows = rows_of()
    changed = copy.deepcopy(rows)
    changed[2].prompt_ids = [BOS] + [(t + 1) % V for t in changed[2].prompt_ids[1:]]
    changed[2].response_ids = [(t + 1) % V for t in changed[2].response_ids]
    with torch.no_grad():
        a, _ = packed_logprobs(model, pack_rows(rows), 1.0)
        b, _ = packed_logprobs(model, pack_rows(changed), 1.0)
        alone, _ = packed_logprobs(model, pack_rows(rows[3:4]), 1.0)
    others = [i for i in range(len(rows)) if i != 2]
    assert not torch.equal(a[2], b[2])
    assert torch.allclose(a[others], b[others], rtol=0, atol=1e-6)
    assert torch.allclose(alone[0], a[3, :alone.shape[1]], atol=1e-6)


def settings_of(method: str, mode: str) -> UpdateSettings:
    """The update settings the method's config gives, with the aggregation mode ``mode``."""
    data = {"preset": "tiny", "method": method, "max_new_tokens": 20, "mini_batches": 2, "loss_agg": mode}
    try:
        cfg = parse_run_config(data)
    except ConfigError:  # the memory methods need a finite training set
        cfg = parse_run_config({**data, "train_size": 64})
    return replace(UpdateSettings.from_config(cfg, pad_id=PAD), entropy_coef=1e-2)


def near_policy(rows, model):
    """The rows with behaviour log-probs the model's own, moved by -0.25, 0 or +0.25 token by token:
    ratios of ~0.78, 1 and ~1.28 straddle every method's clip range (GRPO's 0.8-1.2, DAPO's
    clip-higher 1.28), so each method's clipping shapes the gradient."""
    batch = collate(rows, PAD)
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, batch, 1.0, with_entropy=False)
    out = copy.deepcopy(rows)
    for i, r in enumerate(out):
        p = len(r.prompt_ids)
        r.logprobs = [float(logp[i, p + j]) + 0.25 * ((i + j) % 3 - 1) for j in range(r.length)]
    return out


class GradRecorder(torch.optim.SGD):
    """lr 0: records every optimizer step's gradients and leaves the weights where they are."""

    def __init__(self, params):
        super().__init__(params, lr=0.0)
        self.grads: list[list[torch.Tensor]] = []

    def step(self, closure=None):
        self.grads.append([p.grad.detach().clone() for g in self.param_groups for p in g["params"]])
        return super().step(closure)


def grads_of_one_step(base, settings, rows, adv, kl: bool):
    """Stats and per-optimizer-step gradients of one ``Updater.step`` (two mini-batches, grad
    clipping off, so the recorded gradients are the losses' own)."""
    model = copy.deepcopy(base)
    opt = GradRecorder(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    ref = copy.deepcopy(base).eval().requires_grad_(False) if kl else None
    stats = Updater(model, opt, sched, replace(settings, kl_coef=0.1 if kl else 0.0, grad_clip=1e9), ref).step(rows, adv)
    return stats, opt.grads


@pytest.mark.parametrize("method", method_names())
@pytest.mark.parametrize("mode", AGG_MODES)
def test_the_packed_update_is_the_padded_update(method, mode, monkeypatch):
    torch.manual_seed(0)
    base = small_model("sdpa", 1)
    rows = near_policy(rows_of(), base)
    adv = torch.randn(len(rows), generator=torch.Generator().manual_seed(2))
    settings = settings_of(method, mode)
    longest = max(len(r.prompt_ids) + r.length for r in rows)
    budget = longest  # the smallest budget the submit rules admit: each mini-batch (rows 0-4, 5-8) is cut
    for half in (rows[:5], rows[5:]):
        assert len(packed_micro_batches([len(r.prompt_ids) + r.length for r in half], budget)) >= 2
    calls = []
    import trainer.embedded.update as update

    monkeypatch.setattr(update, "packed_logprobs", lambda *a, **k: calls.append(1) or packed_logprobs(*a, **k))
    for kl in (False, True):
        today, g_today = grads_of_one_step(base, replace(settings, packed=False), rows, adv, kl)
        assert not calls
        for b in (0, budget):
            packed, g_packed = grads_of_one_step(base, replace(settings, packed=True, micro_batch_tokens=b), rows,
                                                 adv, kl)
            assert calls  # the packed forward ran (not the shared-prompt one, which would cost more here)
            calls.clear()
            assert packed.keys() == today.keys()
            for key in today:
                assert packed[key] == pytest.approx(today[key], rel=RTOL, abs=ATOL), key
            assert len(g_packed) == len(g_today) == 2  # two mini-batches: two optimizer steps
            for step_p, step_t in zip(g_packed, g_today):
                for gp, gt in zip(step_p, step_t):
                    assert_close(gp, gt)
        assert any(float(g.abs().max()) > 1e-3 for g in g_today[0])  # real gradients, not zeros


def test_packed_update_setting_means_one_thing_on_both_engines():
    base = {"preset": "tiny"}
    assert parse_run_config(base).packed_update == "auto"
    on = parse_run_config({**base, "packed_update": "on"})
    assert UpdateSettings.from_config(on, pad_id=PAD).packed
    for value in ("auto", "off"):  # auto: the embedded engine pads until packing is measured there
        assert not UpdateSettings.from_config(parse_run_config({**base, "packed_update": value}), pad_id=PAD).packed
    verl = {**base, "engine": "verl"}
    with pytest.raises(ConfigError) as err:  # verl packs with flash-attn's varlen kernels: CUDA only
        parse_run_config({**verl, "packed_update": "on"})
    assert [loc for loc, _ in err.value.issues] == ["packed_update"]
    on_cuda = parse_run_config({**verl, "packed_update": "on", "device": "cuda"})
    kw = dict(out_dir="/o", train_file="/t.parquet", val_files=[], model_dir="/m")
    flag = "actor_rollout_ref.model.use_remove_padding="
    assert flag + "true" in to_overrides(on_cuda, **kw)
    assert flag + "false" in to_overrides(parse_run_config({**verl, "packed_update": "off"}), **kw)
    assert flag + "true" in to_overrides(parse_run_config(verl), **kw)  # auto: verl's packed update on CUDA
    assert flag + "false" in to_overrides(parse_run_config(verl), **kw, device="cpu")  # and padded on the CPU
