"""What a training method is, as data: the spec every other package reads, and the registry.

Stdlib only, so the backend, the CLI and the config module import it without torch or
numpy. A spec says what the rest of the platform needs to know about a method (its label and
colour, which config section it reads, which AERO strategies it switches on, its loss
aggregation and clip range, how verl runs it, which extra metric keys it logs); its step
function (trainer/methods/<family>.py) says how one step collects rollouts. Nothing outside
trainer/methods/ compares method names.

The registry fills itself on first use by importing every module of this package
(:func:`_load`), so adding a method is one new file that calls :func:`register`. Method
modules import numpy at most at module level (torch-using code is imported inside the step
functions), which keeps loading the registry light, and never ``trainer.config`` (it imports
this registry to build its ``method`` enum; type hints go under TYPE_CHECKING).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

if TYPE_CHECKING:
    from trainer.config import RunConfig

Step = Callable[..., Any]  # (cfg, sampler, rng) -> trainer.methods.step.StepResult
INFRASTRUCTURE = ("spec", "sampler", "step")  # modules of this package that define no method


@dataclass(frozen=True)
class VerlMapping:
    """How the verl engine runs the method (trainer/verl/overrides.py, trainer/verl/trainer.py).

    rollout_n: which config value verl's ``rollout.n`` is ("n_total", or "n_explore" when the
    first generation is AERO's exploration pass); adv_estimator: verl's estimator name, used by
    the stock fit; stock_fit: True runs verl's own RayPPOTrainer.fit (every rollout trained,
    verl's estimator), False the curated loop that calls the method's step, whose advantages
    it trains on (the embedded engine's, trainer/verl/collect.py). The reward is always the
    verifier's (verl's "naive" reward manager); DAPO shapes it in its step on both engines."""

    rollout_n: Literal["n_total", "n_explore"] = "n_total"
    adv_estimator: str = "grpo"
    stock_fit: bool = True


@dataclass(frozen=True)
class MethodSpec:
    """One training method (module docstring). ``order`` sorts methods in lists and menus.

    clip: "symmetric" uses (clip_eps, clip_eps); "clip-higher" uses (dapo.eps_low,
    dapo.eps_high). normalize_std: None follows the config's ``adv_estimator`` ("grpo"
    divides by the group std, "drgrpo" does not); False never divides (Dr.GRPO as a method).
    metric_keys: the keys (or ``prefix/*`` families) the method logs beyond the common ones of
    docs/metrics.md. dash: where the method's curves start in the dashboard's dash cycle
    (dashboard/charts.py ``DASHES``; 2, dotted, is kept for after-exploration lines).
    config_section "aero_mem" reads the ``aero`` section as well (aero-mem is AERO plus memory).
    engines: the engines that can run the method (a run config naming another is refused at
    parse time, trainer/config.py). needs_prompt_ids: the method keys state by a stable prompt
    id, so the arithmetic task must draw a finite training set (``train_size``)."""

    name: str
    label: str
    colour: str
    description: str
    family: str
    order: int
    config_section: Literal["aero", "aero_mem", "dapo"] | None = None
    strategies: tuple[bool, bool, bool] = (False, False, False)
    loss_agg: str = "seq-mean-token-mean"
    clip: Literal["symmetric", "clip-higher"] = "symmetric"
    normalize_std: bool | None = None
    verl: VerlMapping = field(default_factory=VerlMapping)
    metric_keys: tuple[str, ...] = ()
    dash: int = 0
    engines: tuple[str, ...] = ("embedded", "verl")
    needs_prompt_ids: bool = False

    def clip_range(self, cfg: RunConfig) -> tuple[float, float]:
        """(eps_low, eps_high) of the clipped surrogate for ``cfg``."""
        if self.clip == "clip-higher":
            return cfg.dapo.eps_low, cfg.dapo.eps_high
        return cfg.clip_eps, cfg.clip_eps

    def divides_by_std(self, cfg: RunConfig) -> bool:
        """Whether group advantages are divided by the group std (GRPO) or not (Dr.GRPO)."""
        return cfg.adv_estimator == "grpo" if self.normalize_std is None else self.normalize_std

    def to_json(self) -> dict[str, Any]:
        """The spec as plain JSON (GET /api/methods); the clip rule and verl mapping as data."""
        out = asdict(self)
        out["strategies"] = dict(zip(("s1", "s2", "s3"), self.strategies))
        out["metric_keys"] = list(self.metric_keys)
        out["engines"] = list(self.engines)
        return out


_REGISTRY: dict[str, tuple[MethodSpec, Step]] = {}
_LOADED = False


def register(spec: MethodSpec, step: Step) -> MethodSpec:
    """Add a method (called at import by its module). A name may be registered once."""
    if spec.name in _REGISTRY and _REGISTRY[spec.name][0] != spec:
        raise ValueError(f"method {spec.name!r} is already registered")
    _REGISTRY[spec.name] = (spec, step)
    return spec


def _load() -> None:
    """Import every method module of this package once (they register themselves)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if not mod.name.startswith("_") and mod.name not in INFRASTRUCTURE:
            importlib.import_module(f"{__package__}.{mod.name}")


def _entries() -> list[tuple[MethodSpec, Step]]:
    _load()
    return sorted(_REGISTRY.values(), key=lambda e: (e[0].order, e[0].name))


def method_names() -> tuple[str, ...]:
    """Every registered method, in display order."""
    return tuple(s.name for s, _ in _entries())


def specs() -> tuple[MethodSpec, ...]:
    return tuple(s for s, _ in _entries())


def get_method(name: str) -> MethodSpec:
    """The spec of ``name``; a ValueError naming the valid methods otherwise."""
    _load()
    if name not in _REGISTRY:
        raise ValueError(f"unknown method {name!r}; valid methods: {', '.join(method_names())}")
    return _REGISTRY[name][0]


def get_step(name: str) -> Step:
    """The engine-independent step function of ``name`` (see :func:`get_method` for errors)."""
    get_method(name)
    return _REGISTRY[name][1]
