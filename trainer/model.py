"""Policy models: the embedded tiny Qwen2-shaped policy, and loading any local HF causal LM.

Never downloads: paths must exist locally (``local_files_only``)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Qwen2Config

# DESIGN.md §6: ~1.05M parameters; samples ~6k tokens/s on 2 CPU cores with a KV cache.
TINY_SHAPE = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                  intermediate_size=512, tie_word_embeddings=True, max_position_embeddings=128)


def tiny_qwen2_config(vocab_size: int, bos_id: int, eos_id: int, pad_id: int, **overrides) -> Qwen2Config:
    shape = {**TINY_SHAPE, **overrides}
    return Qwen2Config(vocab_size=vocab_size, bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id,
                       rope_theta=10000.0, attn_implementation="eager", **shape)


def build_model(config: Qwen2Config, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def load_policy(path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """Load a local HF causal-LM directory. A missing/unreadable directory is a clear error, never a download."""
    p = Path(path)
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"model_path: {p} is not a local model directory (no config.json); nothing is downloaded")
    model = AutoModelForCausalLM.from_pretrained(p, local_files_only=True, dtype=dtype)
    return model.to(device)


def count_parameters(model: torch.nn.Module) -> int:
    """N in the FLOPs formulas: every parameter once (tied embeddings counted once, as the LM head)."""
    return sum(p.numel() for p in model.parameters())
