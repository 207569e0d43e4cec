"""The Launch form's additions: cloning a run (``?clone=ID`` pre-fills the form with its config),
the staleness values a sweep runs, and the alert and tracker inputs. Values go to the API, which
validates them (422 naming the field); the rule text is common/alert_rules.py's, as in ``aero
submit --alert``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import streamlit as st

from common.alert_rules import format_rule, parse_rules
from common.dotted import flatten
from dashboard import forms, run_extras, tables, ui

TRACKERS = ("wandb", "mlflow", "tensorboard")
RULES_HELP = ("One rule per line: KIND[=VALUE][@BENCHMARK][:ACTION]. Kinds: failed, finished, nan_loss, "
              "grad_norm_above=X, entropy_below=X, eval_target=T (held-out Avg@k), no_improvement=N (evaluations). "
              "Actions: notify (default: shown on Run detail and posted to the webhook), stop (end the run cleanly "
              "with a checkpoint), notify_stop.")
STALENESS_SWEEP_ERROR = "offpolicy.sweep"  # where the form shows what is wrong with the staleness values


def cloned_run() -> dict | None:
    """The run named by ``?clone=ID``, or None."""
    wanted = st.query_params.get("clone")
    if not wanted or not wanted.isdigit():
        return None
    run = ui.client().get_run(int(wanted))
    st.info(f"Cloning run #{run['id']} ({ui.md(run['name'])}): the form starts at its values; settings the form does "
            "not show keep the run's.", icon=":material/content_copy:")
    return run


def with_default(spec: forms.FieldSpec, run: dict | None) -> forms.FieldSpec:
    """``spec`` with the cloned run's value as its default."""
    if run is None:
        return spec
    flat = flatten(run["config"])
    return dataclasses.replace(spec, default=flat[spec.path]) if spec.path in flat else spec


def expert_open(run: dict | None, errors: dict[str, str], expert: dict[str, list[forms.FieldSpec]],
                claimed: Callable[[str], bool] = lambda path: False) -> bool:
    """Whether the Expert settings expander starts open: for a cloned asynchronous run (its
    staleness in sight) or one with alert rules, and when the API's last answer names a field
    inside it (its error in sight), a generic one (``claimed``, dashboard/expert_fields.py) too."""
    config = (run or {}).get("config") or {}
    inside = {s.path for specs in expert.values() for s in specs} | {STALENESS_SWEEP_ERROR}
    erred = any(path in inside or path.split(".")[0] in ("alerts", "trackers") or claimed(path) for path in errors)
    return bool(tables.staleness_tag(config) or (config.get("alerts") or {}).get("rules") or erred)


def staleness_sweep_input() -> str:
    """The staleness values to sweep, as typed ('' = none: the field above decides)."""
    return st.text_input("sweep k over (optional)", placeholder="0, 1, 2", key="f_offpolicy_sweep",
                         help="Comma-separated values of max staleness: one run per value x method x seed (a sweep, "
                              "the runs' seed groups then differ by k on the Compare page). One value sets the field; "
                              "empty: the field above.")


def sweep_errors(errors: dict[str, str]) -> dict[str, str]:
    """The API's 422 on a sweep override (``overrides.1.offpolicy.max_staleness``) shown under the
    staleness values, the only overrides the form sends; other fields as they are."""
    out: dict[str, str] = {}
    for path, msg in errors.items():
        parts = path.split(".")
        if parts[0] == "overrides":
            path, msg = STALENESS_SWEEP_ERROR, f"{'.'.join(parts[2:]) or 'value'}: {msg}"
        out[path] = f"{out[path]}; {msg}" if path in out else msg
    return out


def inputs(run: dict | None) -> tuple[str, str, list[str]]:
    """The Alerts and trackers inputs, under their heading in the Expert settings expander:
    (rules text, webhook URL, trackers)."""
    alerts = (run or {}).get("config", {}).get("alerts") or {}
    st.markdown("**Alerts and trackers**")
    rules = st.text_area("Alert rules", value="\n".join(format_rule(r) for r in alerts.get("rules") or []),
                         placeholder="nan_loss:stop\ngrad_norm_above=50:notify_stop\neval_target=0.6:stop",
                         help=RULES_HELP, key="f_alerts_rules")
    webhook = st.text_input("Webhook URL (optional)", value=alerts.get("webhook_url") or "", key="f_alerts_webhook",
                            help="Alerts are POSTed here as JSON; its host must be one the operator allows "
                                 "(AERO_WEBHOOK_HOSTS).")
    trackers = st.multiselect("Trackers", TRACKERS, default=(run or {}).get("config", {}).get("trackers") or [],
                              key="f_trackers", help="Also log this run to W&B (offline unless the operator says "
                              "otherwise), MLflow or TensorBoard (extra aero-lab[trackers] on the workers).")
    return rules, webhook, trackers


def config_of(rules_text: str, webhook: str, trackers: list[str]) -> dict[str, Any]:
    """Flat config entries of the inputs; ValueError naming a bad rule."""
    out: dict[str, Any] = {"alerts.rules": parse_rules(rules_text), "trackers": list(trackers)}
    if webhook.strip():
        out["alerts.webhook_url"] = webhook.strip()
    return out


def base_config(run: dict | None, menu: forms.MethodMenu, methods: list[str]) -> dict[str, Any]:
    """The cloned run's flat config for ``methods`` (their specs from ``menu``; {} when not cloning)."""
    return run_extras.clone_config(run["config"], methods, menu.specs) if run else {}
