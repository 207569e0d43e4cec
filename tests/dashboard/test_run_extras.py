"""The pure helpers of Run detail's alerts and the Launch form's clone (dashboard/run_extras.py)."""

from dashboard.run_extras import alert_badge, can_resume, clone_config, rule_rows

SPECS = {"grpo": {"sections": []}, "aero": {"sections": [{"name": "aero"}]}, "dapo": {"sections": [{"name": "dapo"}]}}


def test_badge_escapes_and_colours_by_what_the_rules_did():
    assert alert_badge({"events": []}) == ""
    noted = alert_badge({"events": [{"kind": "x'><script>", "stopped": False}]})
    assert "#B54708" in noted and "<script>" not in noted and "&#x27;&gt;&lt;script&gt;" in noted
    stopped = alert_badge({"events": [{"kind": "nan_loss", "stopped": False}, {"kind": "nan_loss", "stopped": True}]})
    assert "#B42318" in stopped and "2 alerts · stopped the run" in stopped and "title='nan_loss'" in stopped


def test_rule_rows_pair_each_rule_with_its_event():
    rows = rule_rows({"rules": [{"kind": "nan_loss", "action": "stop"}, {"kind": "eval_target", "threshold": 0.6}],
                      "events": [{"rule": 1, "step": 10, "message": "hit", "delivery": "posted: HTTP 200"}]})
    assert rows == [{"rule": "nan_loss:stop", "action": "stop", "fired at step": None, "message": "", "delivery": ""},
                    {"rule": "eval_target=0.6", "action": "notify", "fired at step": 10, "message": "hit",
                     "delivery": "posted: HTTP 200"}]


def test_clone_config_drops_sections_the_new_method_does_not_read():
    cfg = {"method": "aero", "seed": 4, "name": "x", "steps": 9, "aero": {"k": 2.0}, "optim": {"lr": 0.1}}
    assert clone_config(cfg, ["aero"], SPECS) == {"steps": 9, "aero.k": 2.0, "optim.lr": 0.1}
    assert clone_config(cfg, ["grpo"], SPECS) == {"steps": 9, "optim.lr": 0.1}
    assert can_resume({"status": "cancelled"}) and not can_resume({"status": "running"})
