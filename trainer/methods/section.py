"""A method's own config section: a strict pydantic model, its cross-field rules and its form.

A method module declares the sections it reads (trainer/methods/spec.py ``MethodSpec.sections``);
``RunConfig`` (trainer/spec/config.py) carries exactly the chosen method's sections, so a GRPO config
has no ``aero`` block. The models' base types (``Strict``, ``Field``, ``Issues``) are
trainer/spec/config_types.py's. Pydantic and the stdlib only: the registry, the backend and the
config module import this without torch or numpy.
"""

from __future__ import annotations

from trainer.spec.config_types import Section, no_rules

__all__ = ["Section", "no_rules"]
