"""Policy models: the embedded tiny Qwen2-shaped policy, and loading any local HF causal LM.

Never downloads: paths must exist locally (``local_files_only``)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Qwen2Config
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()  # no per-load weight bars in CLI output and worker logs

# docs/architecture.md §6: ~1.05M parameters; samples ~6k tokens/s on 2 CPU cores with a KV cache.
TINY_SHAPE = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                  intermediate_size=512, tie_word_embeddings=True, max_position_embeddings=128)


def tiny_qwen2_config(vocab_size: int, bos_id: int, eos_id: int, pad_id: int, **overrides) -> Qwen2Config:
    shape = {**TINY_SHAPE, **overrides}
    return Qwen2Config(vocab_size=vocab_size, bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id,
                       rope_theta=10000.0, attn_implementation="eager", **shape)


def build_model(config: Qwen2Config, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def load_policy(path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                gradient_checkpointing: bool = False) -> torch.nn.Module:
    """Load a local HF causal-LM directory (config.json + weights), never downloading.

    ``dtype`` is the dtype the weights are stored in (the caller keeps float32 master weights
    for bf16 autocast on CUDA, see trainer.embedded.presets). A missing directory, a directory without
    config.json, or weights that cannot be read raise FileNotFoundError naming the path.
    ``gradient_checkpointing`` turns on HF activation recomputation (non-reentrant, so the
    inputs need no requires_grad and frozen embeddings still work).
    """
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"model_path: {p} is not a local directory; nothing is downloaded")
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"model_path: {p} is not a local model directory (no config.json); nothing is downloaded")
    try:
        model = AutoModelForCausalLM.from_pretrained(p, local_files_only=True, dtype=dtype)
    except Exception as e:  # noqa: BLE001  (safetensors, OSError, ValueError...: each loader raises its own)
        # weights missing/corrupt, unknown architecture, bad config: say which directory and why
        raise FileNotFoundError(f"model_path: {p} could not be loaded as a causal LM ({type(e).__name__}: "
                                f"{str(e).splitlines()[0] if str(e) else e!r}); nothing is downloaded") from e
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model.to(device)


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """HF activation checkpointing, non-reentrant (transformers 5.x renamed the method and its kwarg)."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def is_gradient_checkpointing(model: torch.nn.Module) -> bool:
    flag = getattr(type(model), "is_activation_checkpointing", None)
    return bool(model.is_activation_checkpointing if flag is not None else model.is_gradient_checkpointing)


def count_parameters(model: torch.nn.Module) -> int:
    """N in the FLOPs formulas: every parameter once (tied embeddings counted once, as the LM head)."""
    return sum(p.numel() for p in model.parameters())
