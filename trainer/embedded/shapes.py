"""Model shapes: the real Qwen2.5 architectures with random weights, built from config files
the repository ships (trainer/assets/shapes/<name>/config.json); nothing is downloaded.

A shape is what ``model_shape`` selects (trainer/spec/config.py): the real vocabulary, widths, depths
and heads, so generation and the update cost what they cost at that size, with weights drawn
from the config's ``initializer_range`` (seeded). Only the scripted strata task
(trainer/tasks/scripted.py) runs on a shape: random weights have nothing to learn and no tokenizer.

======================  ===========  ======  =====  ======  ========  ===========  =====
shape                   parameters   hidden  inter  layers  heads/kv  vocab        tied
======================  ===========  ======  =====  ======  ========  ===========  =====
``qwen2.5-0.5b``        494,032,768  896     4864   24      14/2      151,936      yes
``qwen2.5-1.5b``        1.544B       1536    8960   28      12/2      151,936      yes
``qwen2.5-7b``          7.616B       3584    18944  28      28/4      152,064      no
``tiny-151k`` (CPU)     9,847,360    64      256    2       4/2       151,936      yes
======================  ===========  ======  =====  ======  ========  ===========  =====

``qwen2.5-1.5b`` is Qwen2.5-Math-1.5B (the paper's model: context 4,096, RoPE base 10,000);
``qwen2.5-7b`` has the shape shared by Qwen2.5-7B and Qwen2.5-Math-7B with the Math model's
context and RoPE base (the paper's 7B); ``qwen2.5-0.5b`` is Qwen2.5-0.5B. ``tiny-151k`` keeps
the real 151,936-token vocabulary on a 2-layer, hidden-64 body: on a CPU the LM head dominates
every forward, as it does the log-prob memory of a real model's update.
"""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import torch

from trainer.spec.config import ModelShape
from trainer.embedded.model import enable_gradient_checkpointing

SHAPES_DIR = Path(__file__).parents[1] / "assets" / "shapes"  # package data
SHAPES: dict[str, Path] = {name: SHAPES_DIR / name for name in get_args(ModelShape)}


def shape_config(name: str):
    """The shape's transformers config (a ``Qwen2Config``), read from the shipped file."""
    from transformers import AutoConfig

    if name not in SHAPES:
        raise ValueError(f"unknown model shape {name!r}; known: {', '.join(SHAPES)}")
    return AutoConfig.from_pretrained(SHAPES[name], local_files_only=True)


def build_shape_model(name: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                      seed: int = 0, gradient_checkpointing: bool = False) -> torch.nn.Module:
    """The shape with random weights (the config's initialisation, seeded by ``seed``), built
    directly on ``device`` in ``dtype``: a 7B float32 model is never materialised on the CPU
    first. The global RNGs are left as they were."""
    from transformers import AutoModelForCausalLM

    config, device = shape_config(name), torch.device(device)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type="cuda"):
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model


def shape_parameters(name: str) -> int:
    """The shape's parameter count (tied embeddings once), counted on the meta device: no memory."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(shape_config(name))
    return sum(p.numel() for p in model.parameters())
