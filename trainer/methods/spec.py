"""What a training method is, as data: the spec every other package reads, and the registry.

A method is one module of this package (trainer/methods/<name>.py) that calls :func:`register`
with its spec and its step. The spec declares, apart from each other:

- its config sections (trainer/methods/section.py): the pydantic models of the blocks it reads,
  with their own cross-field rules and Launch-form inputs; ``RunConfig`` carries exactly these;
- its training rules: loss aggregation, clip range, whether group advantages divide by the std;
- what it needs of an engine (:class:`Needs`) and how verl runs it (:class:`VerlMapping`);
- its display metadata (:class:`Display`), which no algorithm reads;
- whether it is the baseline the others are compared against (:func:`baseline_method`).

Its step (``(cfg, sampler, rng, *, spec) -> trainer.methods.step.StepResult``, handed its own
resolved spec by :func:`get_step`) returns the final training rows with their advantages; the
engines only generate what it asks for and train what it returns.
Nothing outside trainer/methods/ compares method names (tests/test_registry_names.py scans for it).

The registry fills itself on first use by importing every module of this package
(:func:`_load`). Method modules import numpy and pydantic at most at module level (torch-using
code is imported inside the step functions), which keeps loading the registry light, and never
``trainer.spec.config`` (it imports this registry to build ``RunConfig``; type hints go under
TYPE_CHECKING).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

from trainer.core.estimators import AdvEstimator, get_adv_estimator
from trainer.methods.aero_strategies import AeroStrategies, strategies_json
from trainer.methods.section import Section

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig

Step = Callable[..., Any]  # (cfg, sampler, rng, *, spec) -> trainer.methods.step.StepResult
INFRASTRUCTURE = ("spec", "sampler", "step", "section")  # modules of this package that define no method


def _n_total(cfg: RunConfig) -> int:
    return cfg.n_total


def _one(cfg: RunConfig) -> int:
    return 1


@dataclass(frozen=True)
class Display:
    """How the dashboard and the CLI show the method. ``order`` sorts methods in lists and menus;
    ``dash`` is where its curves start in the dashboard's dash cycle (dashboard/method_style.py
    ``DASHES``; 2, dotted, is kept for after-exploration lines)."""

    label: str
    colour: str
    description: str
    order: int
    dash: int = 0


BOTH_ENGINES = ("embedded", "verl")


@dataclass(frozen=True)
class Needs:
    """What the method needs of a run. engines: the engines that can run it, declared by the
    method (default the embedded engine only: a method runs on verl once it says so, and a
    config naming an engine it did not declare is refused at submit, naming the method);
    prompt_ids: it keys state by a stable prompt id, so the arithmetic task must draw a finite
    training set (``train_size``); off_policy: its step can train rows sampled by an older policy
    (``offpolicy.max_staleness > 0``, trainer/spec/offpolicy.py). Every step runs whole on the sampler's
    side with one policy version, its state (histories, memories) updated in sampling order, so
    the built-in methods all can; a method whose step reads the trainer's current policy says
    False and is refused at submit; streams: its step generates in rounds that can share one
    continuous batch (``rollout.schedule=continuous``: AERO's exploration and rescue windows); a
    method that makes one call per step would ignore the schedule, so it is refused there."""

    engines: tuple[str, ...] = ("embedded",)
    prompt_ids: bool = False
    off_policy: bool = True
    streams: bool = False


@dataclass(frozen=True)
class VerlMapping:
    """How the verl engine runs the method (trainer/verl/overrides.py, trainer/verl/trainer.py).

    stock_fit: True runs verl's own RayPPOTrainer.fit (every rollout trained, verl's estimator
    ``adv_estimator``), opt-in for methods that are exactly verl's GRPO; False (the default) the
    curated loop, which calls the method's step and trains on the advantages it returns
    (trainer/verl/collect.py), so a method that sets nothing here still trains what its own
    step returns, never verl's GRPO under its name. rollout_n names the config value verl's
    ``rollout.n`` is, and ``first_call_n(cfg)`` computes it (AERO: its exploration size);
    ``prompt_batches(cfg)`` is how many prompt batches one step may draw (DAPO's sampling cap),
    which sizes the training file. The reward is always the verifier's."""

    rollout_n: Literal["n_total", "n_explore"] = "n_total"
    adv_estimator: str = "grpo"
    stock_fit: bool = False
    first_call_n: Callable[[RunConfig], int] = _n_total
    prompt_batches: Callable[[RunConfig], int] = _one


@dataclass(frozen=True)
class MethodSpec:
    """One training method (module docstring).

    clip: "symmetric" uses (clip_eps, clip_eps); "clip-higher" takes the range from
    ``clip_of(cfg)`` (DAPO: its section's eps_low, eps_high). estimator: the key of the group
    advantage estimator (trainer/core/estimators.py) the method always trains with, or None to
    take the config's ``adv_estimator``. route_of: the method this one is when run with its own
    estimator (Dr.GRPO: ``grpo``); a config naming that method with this estimator is refused
    at submit, naming this method, so a run has one label in every comparison. aero: which of
    AERO's strategies (S1, S2, S3) an AERO-family method switches on
    (trainer/methods/aero_strategies.py), read by its step and by the savings waterfall; None
    for every other method. The JSON keeps the key ``strategies`` for every
    method (all false when ``aero`` is None)."""

    name: str
    family: str
    display: Display
    sections: tuple[Section, ...] = ()
    aero: AeroStrategies | None = None
    loss_agg: str = "seq-mean-token-mean"
    clip: Literal["symmetric", "clip-higher"] = "symmetric"
    clip_of: Callable[[RunConfig], tuple[float, float]] | None = None
    estimator: str | None = None
    route_of: str | None = None
    needs: Needs = field(default_factory=Needs)
    verl: VerlMapping = field(default_factory=VerlMapping)
    baseline: bool = False

    def clip_range(self, cfg: RunConfig) -> tuple[float, float]:
        """(eps_low, eps_high) of the clipped surrogate for ``cfg``."""
        return self.clip_of(cfg) if self.clip_of is not None else (cfg.clip_eps, cfg.clip_eps)

    def adv_estimator(self, cfg: RunConfig) -> AdvEstimator:
        """The group advantage estimator a run of this method trains with."""
        return get_adv_estimator(self.estimator or cfg.adv_estimator)

    def divides_by_std(self, cfg: RunConfig) -> bool:
        """Whether group advantages are divided by the group std (GRPO) or not (Dr.GRPO)."""
        return self.adv_estimator(cfg).divides_by_std

    @property
    def normalize_std(self) -> bool | None:
        """None: follows the config's ``adv_estimator``; else whether the fixed estimator
        divides by the group std (the API's ``normalize_std``)."""
        return None if self.estimator is None else get_adv_estimator(self.estimator).divides_by_std

    def reads(self, section: str) -> bool:
        return any(s.name == section for s in self.sections)

    def to_json(self) -> dict[str, Any]:
        """The spec as plain JSON (GET /api/methods): display fields at the top level."""
        d, v = self.display, self.verl
        return {"name": self.name, "label": d.label, "colour": d.colour, "description": d.description,
                "family": self.family, "order": d.order, "dash": d.dash, "baseline": self.baseline,
                "sections": [s.to_json() for s in self.sections],
                "strategies": strategies_json(self.aero), "loss_agg": self.loss_agg,
                "clip": self.clip, "normalize_std": self.normalize_std,
                "verl": {"rollout_n": v.rollout_n, "adv_estimator": v.adv_estimator, "stock_fit": v.stock_fit},
                "engines": list(self.needs.engines), "needs_prompt_ids": self.needs.prompt_ids}


_REGISTRY: dict[str, tuple[MethodSpec, Step]] = {}
_LOADED = False


def register(spec: MethodSpec, step: Step) -> MethodSpec:
    """Add a method (called at import by its module). A name may be registered once: the same
    spec again is a no-op (the first step stays), another spec under the name an error."""
    if spec.name in _REGISTRY:
        if _REGISTRY[spec.name][0] != spec:
            raise ValueError(f"method {spec.name!r} is already registered")
        return spec
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
    return sorted(_REGISTRY.values(), key=lambda e: (e[0].display.order, e[0].name))


def method_names() -> tuple[str, ...]:
    """Every registered method, in display order."""
    return tuple(s.name for s, _ in _entries())


def specs() -> tuple[MethodSpec, ...]:
    return tuple(s for s, _ in _entries())


def all_sections() -> tuple[Section, ...]:
    """Every config section some method reads, once each, in method order."""
    out: dict[str, Section] = {}
    for s in specs():
        for sec in s.sections:
            if out.setdefault(sec.name, sec) is not sec:
                raise ValueError(f"two config sections are named {sec.name!r}")
    return tuple(out.values())


def section_readers(section: str) -> tuple[str, ...]:
    """The methods that read config section ``section``, in display order."""
    return tuple(s.name for s in specs() if s.reads(section))


def baseline_method() -> str:
    """The method the others are compared against (savings, reach, Compare's default)."""
    base = [s.name for s in specs() if s.baseline]
    if len(base) != 1:
        raise ValueError(f"exactly one method must be the baseline; got {base}")
    return base[0]


def get_method(name: str) -> MethodSpec:
    """The spec of ``name``; a ValueError naming the valid methods otherwise."""
    _load()
    if name not in _REGISTRY:
        raise ValueError(f"unknown method {name!r}; valid methods: {', '.join(method_names())}")
    return _REGISTRY[name][0]


def get_step(name: str) -> Step:
    """The engine-independent step of ``name``, given its resolved spec: ``(cfg, sampler, rng)
    -> StepResult``, so the step never looks its spec up by name (see :func:`get_method` for
    errors)."""
    spec = get_method(name)
    return functools.partial(_REGISTRY[name][1], spec=spec)
