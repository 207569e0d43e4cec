"""The worker's side of alerts (trainer/spec/alerts.py): a metric sink that evaluates a run's rules as
its steps and evaluations arrive, records each fired rule in the store, posts it to the run's
webhook and asks the run to stop; and the run's outcome when a rule stopped it.

The webhook URL is untrusted input (any token holder writes a run config). The API checked its
host against the operator's ``AERO_WEBHOOK_HOSTS`` at submit; the worker checks again, from its
own environment, before each post. A post never follows a redirect (a 3xx is a failed delivery:
a listed host must not bounce it to an unlisted one), ignores proxy environment variables,
reads no response body and gives up after ``AERO_WEBHOOK_TIMEOUT_S`` (5 s); its result is
stored with the event, never raised: a broken receiver never fails a run.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import httpx

from backend.db.alerts import fired_rules, record_alert, set_delivery, set_stop_reason
from backend.db.session import session_scope
from trainer.spec.alerts import Alert, AlertsConfig, AlertWatcher, host_allowed, url_problem
from trainer.platform.sinks import MetricSink

log = logging.getLogger(__name__)


def webhook_timeout_s() -> float:
    return float(os.environ.get("AERO_WEBHOOK_TIMEOUT_S", "5"))


def post_webhook(url: str, payload: dict[str, Any], allowed_hosts: tuple[str, ...], timeout_s: float = 5.0) -> str:
    """POST ``payload`` as JSON to ``url``; returns the delivery as text ("posted: HTTP 200",
    "failed: ...", "refused: ..."). Never raises."""
    problem = url_problem(url)
    if problem:
        return f"refused: the webhook URL {problem}"
    if not host_allowed(url, allowed_hosts):
        return "refused: the host is not in this worker's AERO_WEBHOOK_HOSTS"
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False) as c:
            with c.stream("POST", url, json=payload, headers={"User-Agent": "aero-lab-alerts"}) as r:
                code = r.status_code
    except httpx.HTTPError as e:
        return f"failed: {type(e).__name__}: {e}"[:500]
    if 300 <= code < 400:
        return f"failed: HTTP {code} (redirects are not followed)"
    return f"posted: HTTP {code}" if code < 300 else f"failed: HTTP {code}"


def payload(run_id: int, run_name: str, a: Alert) -> dict[str, Any]:
    """The JSON body of a post; ``text`` is what Slack-style incoming webhooks show."""
    what = " and stopped the run" if a.stop else ""
    return {"text": f"AERO Lab run #{run_id} ({run_name}): alert {a.kind}{what}: {a.message}",
            "run_id": run_id, "run_name": run_name, "rule": a.rule, "kind": a.kind, "step": a.step,
            "value": a.value, "message": a.message, "stopped": a.stop}


class AlertSink(MetricSink):
    """Evaluates one run's alert rules on the metrics the trainer logs (both engines). A rule
    whose action stops calls ``request_stop(alert)`` (the run's ``RunControl``), which ends the
    run at its next step boundary with a checkpoint."""

    def __init__(self, url: str, run_id: int, run_name: str, alerts: AlertsConfig, allowed_hosts: tuple[str, ...],
                 request_stop=None):
        self.url, self.run_id, self.run_name = url, run_id, run_name
        self.webhook, self.allowed = alerts.webhook_url, allowed_hosts
        self.request_stop = request_stop
        with session_scope(url) as s:
            fired = fired_rules(s, run_id)
        self.watcher = AlertWatcher(alerts, fired)
        self.last_step = 0
        self.stopped_by: Alert | None = None

    def handle(self, alerts: list[Alert]) -> None:
        for a in alerts:
            with session_scope(self.url) as s:
                ev = record_alert(s, self.run_id, rule=a.rule, kind=a.kind, step=a.step, value=a.value,
                                  message=a.message, stopped=a.stop)
                event_id = None if ev is None else ev.id
            if event_id is None:
                continue  # fired before (another attempt of this run)
            log.info("run %s: alert rule %d (%s) fired: %s", self.run_id, a.rule, a.kind, a.message)
            if a.notify and self.webhook:
                delivery = post_webhook(self.webhook, payload(self.run_id, self.run_name, a), self.allowed,
                                        webhook_timeout_s())
                with session_scope(self.url) as s:
                    set_delivery(s, event_id, delivery)
            elif a.notify:
                with session_scope(self.url) as s:
                    set_delivery(s, event_id, "recorded (no webhook_url)")
            if a.stop and self.stopped_by is None:
                self.stopped_by = a
                if self.request_stop is not None:
                    self.request_stop(a)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.last_step = max(self.last_step, step)
        if self.watcher.rules:
            self.handle(self.watcher.on_step(step, metrics))

    def log_eval(self, step: int, results: dict[str, dict[str, Any]]) -> None:
        if self.watcher.rules:
            self.handle(self.watcher.on_eval(step, results))

    def ended(self, status: str, detail: str = "") -> None:
        """The run ended with ``status``: fire its failed / finished rules. Never raises."""
        try:
            self.handle(self.watcher.on_end(self.last_step, status, detail.splitlines()[0] if detail else ""))
        except Exception:  # noqa: BLE001  (a store hiccup must not change the run's recorded outcome)
            log.warning("run %s: could not record its end alerts", self.run_id, exc_info=True)

    def close(self) -> None:
        pass


def stop_reason(a: Alert) -> str:
    return f"alert rule {a.rule} ({a.kind}): {a.message}"


def early_stop_outcome(url: str, run_id: int, me: str, a: Alert) -> tuple[str, str | None]:
    """(status, error) of a run a rule stopped, with its stop reason recorded: failed for a
    divergence rule (resumable like any failed run), else succeeded."""
    with session_scope(url) as s:
        set_stop_reason(s, run_id, stop_reason(a), me)
    if a.fails_run:
        return "failed", f"Stopped early by {stop_reason(a)}. The last checkpoint is kept; resume the run to go on."
    return "succeeded", None
