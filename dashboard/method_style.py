"""Each method's look on every page: colour, label, dash and whether it rescues prompts, from the
method specs the API serves (GET /api/methods). An immutable value built from the specs and
handed to the figure and table builders that draw methods (dashboard/ui.py builds it once per
page run, tests from the specs directly): no module-level state, so two sessions or two tests
never see each other's methods. Before the specs are known (:data:`NO_METHODS`) every method is
drawn grey under its own name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

OTHER_COLOR = "#7F7F7F"  # a method without a spec (or with a colour that is not a hex colour)
DASHES: tuple[str, ...] = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
DEFAULT_BASELINE = "grpo"  # when no spec says ``baseline``
_HEX = re.compile(r"#[0-9A-Fa-f]{6}")


@dataclass(frozen=True)
class MethodLook:
    """One method's spec, as far as drawing goes."""

    name: str
    label: str
    color: str  # "#RRGGBB": drawn into inline styles, so never anything else
    family: str = ""
    dash: int = 0  # where its curves start in DASHES (see MethodStyle.dash_by_method)
    rescues: bool = False  # S1 (rescue rounds) on: its generated rollouts include rescue rounds


@dataclass(frozen=True)
class MethodStyle:
    """The methods' looks in the specs' order, and the baseline method's name."""

    looks: tuple[MethodLook, ...] = ()
    baseline: str = DEFAULT_BASELINE
    _by_name: Mapping[str, MethodLook] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", MappingProxyType({look.name: look for look in self.looks}))

    @classmethod
    def from_specs(cls, specs: Iterable[Mapping[str, Any]]) -> MethodStyle:
        """From the items of GET /api/methods (``name``, ``label``, ``colour``, ``family``, and
        optionally ``dash``, ``strategies.s1``, ``baseline``), in their order."""
        looks, baseline = [], DEFAULT_BASELINE
        for spec in specs:
            colour = str(spec["colour"])
            looks.append(MethodLook(name=spec["name"], label=spec["label"],
                                    color=colour if _HEX.fullmatch(colour) else OTHER_COLOR,
                                    family=spec.get("family", ""), dash=int(spec.get("dash", 0)),
                                    rescues=bool((spec.get("strategies") or {}).get("s1"))))
            if spec.get("baseline"):
                baseline = spec["name"]
        return cls(tuple(looks), baseline)

    @property
    def names(self) -> tuple[str, ...]:
        """The known methods, in the specs' order."""
        return tuple(look.name for look in self.looks)

    def color(self, method: str) -> str:
        look = self._by_name.get(method)
        return look.color if look else OTHER_COLOR

    def label(self, method: str) -> str:
        look = self._by_name.get(method)
        return look.label if look else method

    def rescues(self, method: str) -> bool:
        look = self._by_name.get(method)
        return bool(look and look.rescues)

    def dash_by_method(self, methods: Sequence[str]) -> list[str]:
        """The dash of each curve of a multi-run chart (one item per run or group, in drawing
        order). Items of one method share its colour, so they differ by dash: the i-th item of a
        method gets the i-th dash after the method's own start (its spec's ``dash``). Two methods'
        i-th items (e.g. GRPO and DAPO of seed 0) never share a dash, so where their curves
        coincide the later one is drawn dashed over the earlier and both colours show. "dot" is
        left to the after-exploration lines of the zero-accuracy charts."""
        seen: dict[str, int] = {}
        out = []
        for m in methods:
            i = seen.get(m, 0)
            look = self._by_name.get(m)
            out.append(DASHES[((look.dash if look else 0) + i) % len(DASHES)])
            seen[m] = i + 1
        return out


NO_METHODS = MethodStyle()  # before (or without) the API's specs: grey, names as labels
