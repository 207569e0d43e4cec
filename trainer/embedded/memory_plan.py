"""What fits on the run's device: the update's token budget per micro-batch, the rows one
generate call may hold, and a refusal before any compute for what cannot fit.

Estimates from the model's shape (docs/engines.md "Memory"), conservative on purpose: a plan
that is too small costs some speed (more micro-batches), one that is too large is an OOM at
step 1. Bytes per parameter, with fp32 master weights (trainer/embedded/presets.py):

    weights 4 + gradients 4 + AdamW moments 8 = 16, plus 2 for autocast's bf16 weight copies on CUDA
    the KL reference (kl_coef > 0): 4 more

Activations saved for backward, per trained token and decoder layer (h hidden, i intermediate,
c bytes of the compute dtype): c (14 h + 4 i) for the attention and MLP inputs and outputs, plus
16 h for the float32 residual stream and the norms' inputs. With activation checkpointing only
each layer's input (4 h) stays, plus one layer recomputed at a time. The LM head never holds
more than one chunk of logits (trainer/embedded/forward.py::head_logprobs_and_entropy).
Generation holds the KV cache, 2 x layers x kv_heads x head_dim x c per token, and float32
sampling temporaries of ~16 bytes per vocabulary entry per row.

Asynchronous training (``offpolicy.max_staleness = k > 0``, trainer/embedded/pipeline.py) adds
the sampler's copy of the weights and up to k + 1 published versions (one weight's worth each),
and generation runs while the update does: the memory left after the states is split, half for
the update's micro-batch, half for the generate call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.spec.config import ConfigError, RunConfig
from trainer.embedded.forward import chunk_elements

GIB = 1 << 30
USABLE = 0.90  # of the device's memory: the CUDA context, the allocator's fragmentation
SLACK = 1.25  # activations: temporaries (SDPA workspace, casts) the per-layer count leaves out
# The automatic budget's ceiling, in tokens: past ~16-32k tokens a forward keeps an H200 busy, so a
# larger micro-batch buys no speed, and the cap bounds what an error in the estimate can cost.
AUTO_BUDGET_CAP = 1 << 16


@dataclass(frozen=True)
class MemoryPlan:
    """The plan for one run on one device (all sizes in bytes unless named tokens/rows)."""

    device_bytes: int
    static_bytes: int  # weights, gradients, optimizer states, reference model
    per_token_bytes: int  # activations per trained token (all layers)
    fixed_bytes: int  # one chunk of LM-head logits and temporaries
    micro_batch_tokens: int  # the update's budget (the config's, or the largest that fits)
    kv_bytes_per_token: int
    generate_rows: int  # rows one generate call may hold at the longest prompt + response

    def as_dict(self) -> dict[str, float]:
        return {"device_gib": self.device_bytes / GIB, "static_gib": self.static_bytes / GIB,
                "activation_mib_per_token": self.per_token_bytes / (1 << 20),
                "micro_batch_tokens": self.micro_batch_tokens, "generate_rows": self.generate_rows}


def device_bytes(device: torch.device, model: torch.nn.Module) -> int:
    """Memory this run may use on ``device``: what is free now plus what the run's own model
    already holds there (so a second run on the same GPU, a bench's next method say, plans
    around the first); on CPU the host's RAM available now."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        # blocks this process's caching allocator holds but no tensor uses are free to this run too
        # (a bench's previous method leaves gigabytes there); mem_get_info counts them as used
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        own = sum(p.numel() * p.element_size() for p in model.parameters() if p.device.type == "cuda")
        return int(free + cached + own)
    import psutil

    return int(psutil.virtual_memory().available)


def activation_bytes_per_token(mc, compute_bytes: int, checkpointing: bool) -> int:
    """Activations saved for backward per trained token, over all layers (module docstring)."""
    h, i, layers = mc.hidden_size, mc.intermediate_size, mc.num_hidden_layers
    layer = compute_bytes * (14 * h + 4 * i) + 16 * h
    if checkpointing:
        return layers * 4 * h + layer + 8 * h
    return layers * layer + 8 * h  # + the final norm's input and output


def kv_bytes_per_token(mc, compute_bytes: int) -> int:
    heads = mc.num_attention_heads
    head_dim = getattr(mc, "head_dim", None) or mc.hidden_size // heads
    kv_heads = getattr(mc, "num_key_value_heads", None) or heads
    return 2 * mc.num_hidden_layers * kv_heads * head_dim * compute_bytes


def _model_field(cfg: RunConfig) -> str:
    return "model_path" if cfg.model_path else ("model_shape" if cfg.model_shape else "preset")


def plan_memory(cfg: RunConfig, model: torch.nn.Module, device: torch.device, compute_dtype: torch.dtype,
                total: int | None = None) -> MemoryPlan:
    """The run's :class:`MemoryPlan`, or a ConfigError naming the field to change when the
    model's states, one row's update or one row's generation cannot fit. ``total`` overrides
    the device's memory (tests, and planning for another device)."""
    mc = model.config
    n = sum(p.numel() for p in model.parameters())
    c = torch.finfo(compute_dtype).bits // 8
    cuda = device.type == "cuda"
    total = device_bytes(device, model) if total is None else total
    usable = int(USABLE * total)
    k = cfg.offpolicy.max_staleness
    weight = next(model.parameters()).element_size()
    copies = n * weight * (k + 2) if k > 0 else 0  # the sampler's model + versions in flight
    static = n * (16 + (2 if cuda and c < 4 else 0)) + (n * 4 if cfg.kl_coef > 0 else 0) + copies
    head = model.get_output_embeddings()
    vocab = head.weight.shape[0] if head is not None else mc.vocab_size
    fixed = chunk_elements(device) * 14  # bf16 logits + fp32 z, softmax and product of one chunk
    per_token = int(SLACK * activation_bytes_per_token(mc, c, cfg.gradient_checkpointing))
    row = cfg.max_prompt_tokens + cfg.max_new_tokens
    if static + fixed >= usable:
        raise ConfigError([(_model_field(cfg), f"{n / 1e9:.2f}B parameters need ~{(static + fixed) / GIB:.1f} GiB for "
                            f"fp32 weights, gradients and AdamW states on {device.type} with {total / GIB:.1f} GiB "
                            "(the embedded engine keeps them on one device); use engine=verl (FSDP, optimizer "
                            "offload) or a smaller model")])
    fits = (usable - static - fixed) // (2 if k > 0 else 1) // per_token  # async: generation runs beside it
    budget = cfg.micro_batch_tokens or int(min(fits, AUTO_BUDGET_CAP))
    if cfg.micro_batch_tokens == 0 and fits < row:
        hint = "" if cfg.gradient_checkpointing else "; gradient_checkpointing=true cuts activations ~10x"
        raise ConfigError([("max_new_tokens", f"one row of max_prompt_tokens + max_new_tokens = {row} tokens needs "
                            f"~{row * per_token / GIB:.1f} GiB of activations; {max(fits, 0) * per_token / GIB:.1f} GiB "
                            f"are left on {device.type} after the model's states{hint}")])
    kv = kv_bytes_per_token(mc, c)
    gen_static = n * (12 + (2 if cuda and c < 4 else 0)) + (n * 4 if cfg.kl_coef > 0 else 0)  # gradients are freed
    gen_free = usable - gen_static if k == 0 else (usable - static - fixed) // 2  # async: beside the update
    rows = gen_free // (row * kv + 16 * vocab)
    if rows < 1:
        raise ConfigError([("max_new_tokens", f"one generated row of {row} tokens needs "
                            f"{(row * kv + 16 * vocab) / GIB:.2f} GiB of KV cache; the device has none left")])
    return MemoryPlan(device_bytes=total, static_bytes=static, per_token_bytes=per_token, fixed_bytes=fixed,
                      micro_batch_tokens=budget, kv_bytes_per_token=kv, generate_rows=int(rows))
