"""Pure helpers for a run's alerts, resume and clone on the dashboard (no Streamlit): the alert
badge's HTML, which runs may resume, and a cloned run's config for the Launch form."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from common.alert_rules import format_rule
from common.dotted import flatten

RESUMABLE = ("failed", "cancelled")
STOP_COLOR, NOTE_COLOR = "#B42318", "#B54708"  # fixed palette: never user text in a style


def can_resume(run: Mapping[str, Any]) -> bool:
    return run.get("status") in RESUMABLE


def alert_badge(alerts: Mapping[str, Any]) -> str:
    """Inline HTML for the run's fired alerts ("" when none fired): red when a rule stopped the
    run, amber otherwise; the kinds that fired in its title. Every text is escaped."""
    events = list(alerts.get("events") or [])
    if not events:
        return ""
    stopped = any(e.get("stopped") for e in events)
    color = STOP_COLOR if stopped else NOTE_COLOR
    kinds = ", ".join(dict.fromkeys(str(e.get("kind")) for e in events))
    text = f"{len(events)} alert{'s' if len(events) != 1 else ''}" + (" · stopped the run" if stopped else "")
    return (f"<span class='aero-alert-badge' data-testid='alert-badge' title='{html.escape(kinds, quote=True)}' "
            f"style='display:inline-block;padding:2px 10px;border-radius:12px;font-size:0.85rem;font-weight:600;"
            f"color:#fff;background:{color}'>{html.escape(text)}</span>")


def rule_rows(alerts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per rule: its text form and, once fired, the step, message and delivery."""
    fired = {e["rule"]: e for e in alerts.get("events") or []}
    rows = []
    for i, rule in enumerate(alerts.get("rules") or []):
        e = fired.get(i, {})
        rows.append({"rule": format_rule(rule), "action": rule.get("action", "notify"),
                     "fired at step": e.get("step"), "message": e.get("message", ""), "delivery": e.get("delivery", "")})
    return rows


def clone_config(config: Mapping[str, Any], methods: Sequence[str], specs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A run's config as the flat base of a new submission for ``methods``: the sections no
    chosen method reads are dropped (the API would refuse them), and so are the name and seed
    (the form sets those)."""
    readers = {str(sec["name"]) for m in methods for sec in specs.get(m, {}).get("sections", ()) if "name" in sec}
    sections = {str(sec["name"]) for spec in specs.values() for sec in spec.get("sections", ()) if "name" in sec}
    flat = flatten({k: v for k, v in config.items() if k not in ("name", "seed", "method")})
    return {k: v for k, v in flat.items() if k.split(".")[0] not in sections - readers}
