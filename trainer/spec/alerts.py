"""Alert rules and early stopping: the ``alerts`` block of a run config and the watcher that
evaluates it, step by step and eval by eval.

A rule fires at most once per run. Its ``action`` says what happens then: ``notify`` records the
alert (shown on Run detail, ``GET /api/runs/{id}/alerts``) and posts it to the run's webhook when
one is set; ``stop`` ends the run cleanly at the next step boundary, with a checkpoint, as a
cancel does; ``notify_stop`` does both. Outcomes (the worker, worker/alerts.py): a run stopped by
a divergence rule (``nan_loss``, ``grad_norm_above``, ``entropy_below``) is *failed* with the rule
as its error (and may be resumed); one stopped by ``eval_target`` or ``no_improvement`` is
*succeeded*; both record the rule as the run's ``stop_reason``.

A run config is untrusted input: the webhook's host must be one the operator lists
(``AERO_WEBHOOK_HOSTS``; none by default, so no webhook is allowed until the operator says so),
checked at submit and again by the worker before each post. Pydantic and the stdlib only: the
backend imports this module through trainer.spec.config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field

from trainer.spec.config_types import Issues, Strict

RuleKind = Literal["failed", "finished", "nan_loss", "grad_norm_above", "entropy_below", "eval_target",
                   "no_improvement"]
Action = Literal["notify", "stop", "notify_stop"]

# what each kind reads, and whether it needs a threshold / a patience
NEEDS_THRESHOLD = ("grad_norm_above", "entropy_below", "eval_target")
END_KINDS = ("failed", "finished")  # fire when the run ends: nothing left to stop
DIVERGENCE_KINDS = ("nan_loss", "grad_norm_above", "entropy_below")  # a stop fails the run
LOSS_KEYS = ("loss/total", "loss/policy")
GRAD_NORM_KEY = "train/grad_norm"
ENTROPY_KEY = "train/entropy"
OVERALL = "overall"


class AlertRule(Strict):
    kind: RuleKind = Field(description="failed | finished (the run ended so) | nan_loss (loss/total or loss/policy "
                           "not finite) | grad_norm_above (train/grad_norm > threshold) | entropy_below (train/entropy "
                           "< threshold) | eval_target (held-out Avg@k of `benchmark` >= threshold) | no_improvement "
                           "(`patience` evaluations in a row without a new best Avg@k of `benchmark`).")
    threshold: float | None = Field(None, ge=-1e12, le=1e12, allow_inf_nan=False,
                                    description="The bound of grad_norm_above, entropy_below and eval_target.")
    patience: int | None = Field(None, ge=1, le=1000, description="no_improvement: evaluations without a new best.")
    benchmark: str = Field(OVERALL, min_length=1, max_length=200, description="The benchmark eval_target and "
                           "no_improvement read ('overall' pools every benchmark).")
    action: Action = Field("notify", description="notify: record it and post it to the webhook; stop: end the run "
                           "cleanly with a checkpoint; notify_stop: both. failed and finished only notify.")


class AlertsConfig(Strict):
    webhook_url: str | None = Field(None, max_length=2048, description="http(s) URL the alerts are POSTed to as JSON "
                                    "(a `text` field as Slack's incoming webhooks read it); its host must be in the "
                                    "operator's AERO_WEBHOOK_HOSTS. Unset: alerts are only recorded.")
    rules: list[AlertRule] = Field(default_factory=list, max_length=16, description="At most 16 rules, each fired "
                                   "at most once per run.")


def rule_issues(alerts: AlertsConfig) -> Issues:
    """Cross-field rules of the block, each naming its field (``alerts.rules.<i>.<field>``)."""
    issues: Issues = []
    for i, r in enumerate(alerts.rules):
        at = f"alerts.rules.{i}"
        if r.kind in NEEDS_THRESHOLD and r.threshold is None:
            issues.append((f"{at}.threshold", f"a {r.kind} rule needs a threshold"))
        if r.kind == "eval_target" and r.threshold is not None and not 0 <= r.threshold <= 1:
            issues.append((f"{at}.threshold", "an Avg@k target is a fraction between 0 and 1"))
        if r.kind == "no_improvement" and r.patience is None:
            issues.append((f"{at}.patience", "a no_improvement rule needs a patience (evaluations without a new best)"))
        if r.kind in END_KINDS and r.action != "notify":
            issues.append((f"{at}.action", f"a {r.kind} rule fires when the run has ended: its action is notify"))
    if alerts.webhook_url is not None:
        problem = url_problem(alerts.webhook_url)
        if problem:
            issues.append(("alerts.webhook_url", problem))
    return issues


def url_problem(url: str) -> str | None:
    """Why ``url`` is no webhook URL (scheme, host, credentials, control characters), or None."""
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        return "must not contain spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError as e:
        return f"is not a URL: {e}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (user:password@); put a secret in the path if the receiver needs one"
    return None


def host_allowed(url: str, allowed: tuple[str, ...]) -> bool:
    """Whether ``url``'s host (``host`` or ``host:port`` entries, case-insensitive) is listed."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    for entry in allowed:
        e = entry.strip().lower()
        if not e:
            continue
        if e.startswith("["):  # [v6]:port
            name, _, p = e[1:].partition("]")
            p = p.lstrip(":")
        else:
            name, _, p = e.rpartition(":") if e.count(":") == 1 else (e, "", "")
        if name == host and (not p or p == str(port)):
            return True
    return False


def webhook_policy_issues(alerts: AlertsConfig, allowed: tuple[str, ...]) -> Issues:
    """The operator's allowlist applied to the run's webhook (trainer/spec/operator_policy.py)."""
    url = alerts.webhook_url
    if url is None or url_problem(url):
        return []
    if not host_allowed(url, allowed):
        return [("alerts.webhook_url", f"host {urlsplit(url).hostname!r} is not in the operator's webhook allowlist "
                 "(AERO_WEBHOOK_HOSTS); ask the operator to add it, or leave webhook_url unset")]
    return []


# ---------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class Alert:
    """One fired rule."""

    rule: int  # index in alerts.rules
    kind: str
    step: int
    value: float | None
    message: str
    notify: bool
    stop: bool

    @property
    def fails_run(self) -> bool:
        """A stop by a divergence rule ends the run as failed; others as succeeded."""
        return self.stop and self.kind in DIVERGENCE_KINDS


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f


class AlertWatcher:
    """Evaluates the rules over a run's steps and evaluations. ``fired`` holds the indices of rules
    that already fired (the worker passes those stored before a resume, so none fires twice). The
    no-improvement count restarts with the process (it is not checkpointed)."""

    def __init__(self, alerts: AlertsConfig, fired: set[int] | None = None):
        self.rules = list(alerts.rules)
        self.fired: set[int] = set(fired or ())
        self.best: dict[int, float] = {}
        self.since_best: dict[int, int] = {}

    def _fire(self, i: int, step: int, value: float | None, message: str) -> Alert:
        self.fired.add(i)
        action = self.rules[i].action
        return Alert(i, self.rules[i].kind, step, value, message, notify=action in ("notify", "notify_stop"),
                     stop=action in ("stop", "notify_stop"))

    def _open(self, *kinds: str):
        return [(i, r) for i, r in enumerate(self.rules) if r.kind in kinds and i not in self.fired]

    def on_step(self, step: int, metrics: dict[str, Any]) -> list[Alert]:
        out = []
        for i, r in self._open("nan_loss", "grad_norm_above", "entropy_below"):
            if r.kind == "nan_loss":
                bad = [(k, _finite(metrics[k])) for k in LOSS_KEYS if k in metrics]
                bad = [(k, v) for k, v in bad if v is None or not math.isfinite(v)]
                if bad:
                    out.append(self._fire(i, step, None, f"{bad[0][0]} is not finite at step {step}"))
                continue
            key = GRAD_NORM_KEY if r.kind == "grad_norm_above" else ENTROPY_KEY
            v = _finite(metrics.get(key))
            if v is None or r.threshold is None:
                continue
            if (r.kind == "grad_norm_above" and (v > r.threshold or math.isnan(v))) or \
                    (r.kind == "entropy_below" and v < r.threshold):
                word = "above" if r.kind == "grad_norm_above" else "below"
                out.append(self._fire(i, step, v if math.isfinite(v) else None,
                                      f"{key} = {v:.4g} at step {step}, {word} {r.threshold:g}"))
        return out

    def on_eval(self, step: int, results: dict[str, dict[str, Any]]) -> list[Alert]:
        out = []
        for i, r in self._open("eval_target", "no_improvement"):
            v = _finite((results.get(r.benchmark) or {}).get("avg_at_k"))
            if v is None or not math.isfinite(v):
                continue
            if r.kind == "eval_target" and r.threshold is not None and v >= r.threshold:
                out.append(self._fire(i, step, v, f"held-out Avg@k of {r.benchmark} = {v:.4f} at step {step} "
                                                  f"reached the target {r.threshold:g}"))
            elif r.kind == "no_improvement":
                if i not in self.best or v > self.best[i]:
                    self.best[i], self.since_best[i] = v, 0
                    continue
                self.since_best[i] += 1
                if r.patience is not None and self.since_best[i] >= r.patience:
                    out.append(self._fire(i, step, v, f"held-out Avg@k of {r.benchmark} has not improved on "
                                                      f"{self.best[i]:.4f} for {self.since_best[i]} evaluations "
                                                      f"(step {step})"))
        return out

    def on_end(self, step: int, status: str, detail: str = "") -> list[Alert]:
        """The run ended with ``status`` (succeeded | cancelled | failed)."""
        kind = "failed" if status == "failed" else "finished"
        msg = f"run {status} at step {step}" + (f": {detail}" if detail else "")
        return [self._fire(i, step, None, msg) for i, _ in self._open(kind)]
