"""A method's own config section: a strict pydantic model, its cross-field rules and its form.

A method module declares the sections it reads (trainer/methods/spec.py ``MethodSpec.sections``);
``RunConfig`` (trainer/config.py) carries exactly the chosen method's sections, so a GRPO config
has no ``aero`` block. The models' base types (``Strict``, ``Field``, ``Issues``) are
trainer/config_types.py's. Pydantic and the stdlib only: the registry, the backend and the
config module import this without torch or numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from trainer.config_types import Issues, Strict

if TYPE_CHECKING:
    from trainer.config import RunConfig


def no_rules(cfg: RunConfig) -> Issues:
    return []


@dataclass(frozen=True)
class Section:
    """One config block a method reads.

    name: the RunConfig field (``aero`` -> ``cfg.aero``); model: its pydantic model (per-field
    bounds and help texts); rules: cross-field checks of a config whose method reads the
    section, each naming the field to change; title and form: the Launch form's heading and
    its (dotted path, label) inputs, top-level fields the section needs (``train_size``)
    included."""

    name: str
    model: type[Strict]
    title: str
    form: tuple[tuple[str, str], ...] = ()
    rules: Callable[[RunConfig], Issues] = no_rules

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "form": [list(f) for f in self.form]}
