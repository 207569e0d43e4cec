"""Which of AERO's three strategies an AERO-family method switches on (paper §4.2, §4.4).

    S1  adaptive rescue of prompts with no correct exploration rollout (§4.2.1)
    S2  Bayesian baseline for zero-variance groups (§4.2.2)
    S3  rejection sampling of negatives in low-success groups (§4.2.3)

An AERO-family method's spec carries them (``MethodSpec.aero``; None for every other method);
its step (trainer/methods/aero.py, aero_mem.py) and the savings waterfall
(backend/services/waterfall.py) read them. Standard library only: the method registry
(trainer/methods/spec.py), which the API imports, serialises them.

The registry's loader imports this module with the method modules; it registers no method.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AeroStrategies:
    """S1 rescue, S2 Bayesian zero-variance groups, S3 rejection sampling: on or off."""

    s1: bool
    s2: bool
    s3: bool

    @property
    def flags(self) -> tuple[bool, bool, bool]:
        """(s1, s2, s3)."""
        return self.s1, self.s2, self.s3

    def to_json(self) -> dict[str, bool]:
        return {"s1": self.s1, "s2": self.s2, "s3": self.s3}


ALL = AeroStrategies(True, True, True)  # full AERO
NONE = AeroStrategies(False, False, False)


def strategies_json(aero: AeroStrategies | None) -> dict[str, bool]:
    """The ``strategies`` object of GET /api/methods: {"s1", "s2", "s3"}, all false for a method
    that is not AERO's (``aero`` None)."""
    return (NONE if aero is None else aero).to_json()
