"""The short text form of alert rules (trainer/spec/alerts.py), shared by ``aero submit --alert`` and
the Launch form (stdlib only: the dashboard imports it). The API validates what comes out.

    KIND[=VALUE][@BENCHMARK][:ACTION]

    nan_loss:stop                 grad_norm_above=50:notify_stop   entropy_below=0.05
    eval_target=0.6@overall:stop  no_improvement=3:stop            failed      finished

VALUE is the threshold, or the patience (evaluations) of ``no_improvement``; ACTION is notify
(default), stop or notify_stop. Several rules: one per ``--alert``, or separated by ``;`` or
new lines.
"""

from __future__ import annotations

import re
from typing import Any

_RULE = re.compile(r"^(?P<kind>[a-z_]+)(?:=(?P<value>[^@:]+))?(?:@(?P<bench>[^:]+))?(?::(?P<action>[a-z_]+))?$")


def parse_rule(text: str) -> dict[str, Any]:
    """One rule's text -> its JSON (``{"kind", "threshold" | "patience", "benchmark", "action"}``).
    Raises ValueError naming what is wrong."""
    m = _RULE.match(text.strip())
    if not m:
        raise ValueError(f"alert rule {text.strip()!r}: write KIND[=VALUE][@BENCHMARK][:ACTION], "
                         "e.g. grad_norm_above=50:stop")
    rule: dict[str, Any] = {"kind": m["kind"]}
    if m["value"] is not None:
        try:
            value = float(m["value"])
        except ValueError:
            raise ValueError(f"alert rule {text.strip()!r}: {m['value']!r} is not a number") from None
        if m["kind"] == "no_improvement":
            if not value.is_integer():
                raise ValueError(f"alert rule {text.strip()!r}: the patience is a whole number of evaluations")
            rule["patience"] = int(value)
        else:
            rule["threshold"] = value
    if m["bench"]:
        rule["benchmark"] = m["bench"].strip()
    if m["action"]:
        rule["action"] = m["action"]
    return rule


def parse_rules(text: str) -> list[dict[str, Any]]:
    """Rules separated by ``;`` or new lines; blanks skipped."""
    return [parse_rule(part) for part in re.split(r"[;\n]", text or "") if part.strip()]


def format_rule(rule: dict[str, Any]) -> str:
    """The text form of a rule's JSON (the inverse of :func:`parse_rule`)."""
    out = str(rule.get("kind", ""))
    value = rule.get("patience") if rule.get("kind") == "no_improvement" else rule.get("threshold")
    if value is not None:
        out += f"={value:g}" if isinstance(value, float) else f"={value}"
    if rule.get("benchmark") and rule.get("benchmark") != "overall":
        out += f"@{rule['benchmark']}"
    if rule.get("action") and rule.get("action") != "notify":
        out += f":{rule['action']}"
    return out
