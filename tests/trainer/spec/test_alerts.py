"""Alert rules (trainer/spec/alerts.py): the config block's rules, the webhook allowlist, and the
watcher that fires each rule once, on hand-made steps and evaluations."""

import math

import pytest

from trainer.spec.alerts import AlertsConfig, AlertWatcher, host_allowed, rule_issues, url_problem
from trainer.spec.config import ConfigError, parse_run_config
from trainer.spec.operator_policy import RunPolicy


def watcher(*rules, fired=None):
    return AlertWatcher(AlertsConfig(rules=list(rules)), fired)


def test_divergence_rules_fire_once_on_the_step_that_trips_them():
    w = watcher({"kind": "nan_loss", "action": "stop"}, {"kind": "grad_norm_above", "threshold": 10.0},
                {"kind": "entropy_below", "threshold": 0.1, "action": "notify_stop"})
    assert w.on_step(1, {"loss/total": 0.3, "train/grad_norm": 9.9, "train/entropy": 0.5}) == []
    fired = w.on_step(2, {"loss/total": float("nan"), "train/grad_norm": 10.5, "train/entropy": 0.1})
    assert [(a.rule, a.kind, a.step, a.stop, a.notify) for a in fired] == [(0, "nan_loss", 2, True, False),
                                                                          (1, "grad_norm_above", 2, False, True)]
    assert fired[1].value == 10.5 and "10.5" in fired[1].message
    later = w.on_step(3, {"loss/total": math.inf, "train/grad_norm": 99.0, "train/entropy": 0.05})
    assert [(a.kind, a.value, a.fails_run) for a in later] == [("entropy_below", 0.05, True)]  # the others fired before
    assert w.on_step(4, {"loss/total": float("nan"), "train/grad_norm": 99.0, "train/entropy": 0.0}) == []


def test_a_missing_key_never_fires_and_a_nan_grad_norm_counts_as_above():
    w = watcher({"kind": "grad_norm_above", "threshold": 1.0}, {"kind": "entropy_below", "threshold": 0.5})
    assert w.on_step(1, {"reward/mean": 0.2}) == []
    assert [a.kind for a in w.on_step(2, {"train/grad_norm": float("nan")})] == ["grad_norm_above"]


def test_eval_target_and_no_improvement_read_the_named_benchmark():
    w = watcher({"kind": "eval_target", "threshold": 0.6, "action": "stop"},
                {"kind": "no_improvement", "patience": 2, "benchmark": "b1", "action": "stop"})
    ev = lambda overall, b1: {"overall": {"avg_at_k": overall}, "b1": {"avg_at_k": b1}}  # noqa: E731
    assert w.on_eval(0, ev(0.2, 0.30)) == []
    assert w.on_eval(5, ev(0.5, 0.40)) == []  # a new best of b1
    assert w.on_eval(10, ev(0.59, 0.40)) == []  # 1 eval without a new best (equal is not better)
    hit = w.on_eval(15, ev(0.61, 0.35))
    assert [(a.kind, a.step, a.stop, a.fails_run) for a in hit] == [("eval_target", 15, True, False),
                                                                   ("no_improvement", 15, True, False)]
    assert hit[0].value == 0.61 and "0.4000" in hit[1].message and "2 evaluations" in hit[1].message


def test_end_rules_and_rules_fired_before_a_resume():
    w = watcher({"kind": "failed"}, {"kind": "finished"}, {"kind": "grad_norm_above", "threshold": 1.0}, fired={2})
    assert w.on_step(7, {"train/grad_norm": 5.0}) == []  # fired before the resume: never again
    end = w.on_end(7, "failed", "RuntimeError: boom")
    assert [(a.kind, a.notify, a.stop) for a in end] == [("failed", True, False)] and "boom" in end[0].message
    assert [a.kind for a in watcher({"kind": "finished"}).on_end(3, "cancelled")] == ["finished"]


@pytest.mark.parametrize("rule, field, words", [
    ({"kind": "grad_norm_above"}, "alerts.rules.0.threshold", "needs a threshold"),
    ({"kind": "eval_target", "threshold": 60}, "alerts.rules.0.threshold", "between 0 and 1"),
    ({"kind": "no_improvement"}, "alerts.rules.0.patience", "needs a patience"),
    ({"kind": "failed", "action": "stop"}, "alerts.rules.0.action", "its action is notify"),
])
def test_rule_issues_name_the_field(rule, field, words):
    issues = rule_issues(AlertsConfig(rules=[rule]))
    assert [f for f, _ in issues] == [field] and words in issues[0][1]


def test_bad_values_are_refused_by_the_schema_with_their_path():
    for alerts, loc in [({"rules": [{"kind": "explode"}]}, "alerts.rules.0.kind"),
                        ({"rules": [{"kind": "grad_norm_above", "threshold": float("inf")}]}, "alerts.rules.0.threshold"),
                        ({"rules": [{"kind": "nan_loss", "action": "page"}]}, "alerts.rules.0.action"),
                        ({"rules": [{"kind": "nan_loss"}] * 17}, "alerts.rules"),
                        ({"webhook_url": "x" * 3000}, "alerts.webhook_url")]:
        with pytest.raises(ConfigError) as e:
            parse_run_config({"alerts": alerts})
        assert e.value.issues[0][0] == loc, e.value.issues


@pytest.mark.parametrize("url, problem", [
    ("https://hooks.example.com/T/1", None), ("ftp://x.org/a", "http:// or https://"), ("http:///path", "with a host"),
    ("http://u:p@h.org/", "credentials"), ("http://h.org/a b", "spaces or control"), ("http://h.org:99999/", "not a URL"),
])
def test_url_problem(url, problem):
    got = url_problem(url)
    assert (got is None) if problem is None else (problem in got)


def test_host_allowlist_is_exact_and_port_aware():
    allowed = ("hooks.slack.com", "127.0.0.1:8080", "[::1]:9000")
    assert host_allowed("https://HOOKS.slack.com/services/x", allowed)
    assert not host_allowed("https://hooks.slack.com.evil.org/x", allowed)
    assert not host_allowed("https://evil.org/?u=hooks.slack.com", allowed)
    assert host_allowed("http://127.0.0.1:8080/hook", allowed) and not host_allowed("http://127.0.0.1:8081/", allowed)
    assert not host_allowed("http://127.0.0.1/", allowed)  # port 80
    assert host_allowed("http://[::1]:9000/", allowed) and not host_allowed("http://[::1]:9001/", allowed)
    assert not host_allowed("http://anything/", ())


def test_the_operator_allowlist_guards_submit_default_deny():
    cfg = {"alerts": {"webhook_url": "http://127.0.0.1:8080/hook", "rules": [{"kind": "failed"}]}}
    with pytest.raises(ConfigError) as e:
        parse_run_config(cfg, RunPolicy())
    assert e.value.issues[0][0] == "alerts.webhook_url" and "AERO_WEBHOOK_HOSTS" in e.value.issues[0][1]
    assert parse_run_config(cfg, RunPolicy(webhook_hosts=("127.0.0.1:8080",))).alerts.webhook_url.endswith("/hook")
    policy = RunPolicy.from_env({"AERO_WEBHOOK_HOSTS": " a.org , 127.0.0.1:8080 ,"})
    assert policy.webhook_hosts == ("a.org", "127.0.0.1:8080")
