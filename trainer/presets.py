"""Build a run's task, policy and rollout engine from its config (presets or a local model)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.config import ConfigError, RunConfig
from trainer.model import count_parameters, load_policy

ASSETS = Path(__file__).parent / "assets"
PRESETS = {"tiny": ASSETS / "tiny"}  # `aero pretrain` writes it; shipped in the repo


@dataclass
class Setup:
    """Everything built from a config before any compute: task, policy, engine."""

    task: Any
    model: torch.nn.Module
    engine: Any
    device: torch.device
    n_params: int
    n_layers: int
    d_model: int


def resolve_device(cfg: RunConfig) -> tuple[torch.device, torch.dtype]:
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError([("device", "cuda requested but no CUDA device is visible; use device=auto or cpu")])
    dev = torch.device("cuda" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()) else "cpu")
    if cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and dev.type == "cuda"):
        return dev, torch.bfloat16
    return dev, torch.float32


def load_setup(cfg: RunConfig) -> Setup:
    from trainer.rollout import make_engine

    device, dtype = resolve_device(cfg)
    path = PRESETS[cfg.preset] if cfg.preset else Path(cfg.model_path)
    if cfg.preset and not (path / "config.json").is_file():
        raise ConfigError([("preset", f"preset '{cfg.preset}' has no checkpoint at {path}; run `aero pretrain`")])
    try:
        model = load_policy(path, device=device, dtype=dtype)
    except FileNotFoundError as e:
        raise ConfigError([("model_path", str(e))]) from None
    task = build_task(cfg, path)
    engine = make_engine("embedded", model=model, eos_id=task.tokenizer.eos_id, pad_id=task.tokenizer.pad_id,
                         device=device, dtype=dtype)
    mc = model.config
    return Setup(task=task, model=model, engine=engine, device=device, n_params=count_parameters(model),
                 n_layers=mc.num_hidden_layers, d_model=mc.hidden_size)


def build_task(cfg: RunConfig, model_dir: Path):
    """The run's task, with the tokenizer that ships in the model directory."""
    if cfg.task == "arithmetic":
        from trainer.tasks.arithmetic import ArithmeticTask
        from trainer.tasks.tokenizer import CharTokenizer

        return ArithmeticTask(tokenizer=CharTokenizer.load(model_dir), benchmark_size=cfg.eval_problems)
    from trainer.tasks.math import MathTask

    return MathTask.from_model_dir(cfg.train_data, model_dir)
