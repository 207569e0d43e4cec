"""Run detail's alert badge, resume, clone and notes/tags, and the Launch form's alert rules
and clone, under AppTest against a live API (tests/dashboard/conftest.py)."""

import httpx

from tests.dashboard.apptest import open_page

from backend.db.alerts import record_alert, set_stop_reason
from backend.db.models import Run


def html_of(at) -> str:
    return "\n".join(str(getattr(e.proto, "body", "")) for e in at.get("html"))


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


def no_errors(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, texts(at.error)


def failed_run_with_alert(api, helpers) -> int:
    rid = helpers.add_run(api.db_url, "grpo", steps=10, done=3, status="failed", error="Stopped early by alert rule 0")
    with helpers.session_scope(api.db_url) as s:
        run = s.get(Run, rid)
        run.config = {**run.config, "alerts": {"webhook_url": None, "rules": [
            {"kind": "grad_norm_above", "threshold": 5.0, "patience": None, "benchmark": "overall", "action": "stop"},
            {"kind": "failed", "threshold": None, "patience": None, "benchmark": "overall", "action": "notify"}]}}
        record_alert(s, rid, rule=0, kind="grad_norm_above", step=3, value=7.5,
                     message="train/grad_norm = 7.5 at step 3, above 5 <b>x</b>", stopped=True)
        set_stop_reason(s, rid, "alert rule 0 (grad_norm_above): train/grad_norm = 7.5 at step 3, above 5", "test@host")
    return rid


def test_run_detail_shows_the_alert_badge_and_resumes(fresh_api, use_api, helpers):
    use_api(fresh_api)
    rid = failed_run_with_alert(fresh_api, helpers)
    at = open_page("run_detail", {"run": str(rid)})
    assert not at.exception, [e.value for e in at.exception]
    html = html_of(at)
    assert "alert-badge" in html and "1 alert · stopped the run" in html and "<b>x</b>" not in html
    assert "Stopped early" in texts(at.warning) and "grad_norm_above" in texts(at.warning)
    frames = list(at.dataframe)
    assert any("grad_norm_above=5:stop" in str(f.value) for f in frames)
    at.button(key="detail_resume").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert httpx.get(f"{fresh_api.url}/api/runs/{rid}").json()["status"] == "queued"
    assert fresh_api.enqueued == [(rid, "cpu")]


def test_run_detail_edits_notes_and_tags(fresh_api, use_api, helpers):
    use_api(fresh_api)
    rid = helpers.add_run(fresh_api.db_url, "aero", steps=10, done=10, status="succeeded", tags=("old",))
    at = open_page("run_detail", {"run": str(rid)})
    assert not [b for b in at.button if b.key == "detail_resume"]  # a succeeded run does not resume
    at.text_area(key="detail_notes_text").set_value("lr too high after step 40")
    at.text_input(key="detail_tags_text").set_value("old, keep ,lr")
    next(b for b in at.button if b.label == "Save").click().run()
    no_errors(at)
    run = httpx.get(f"{fresh_api.url}/api/runs/{rid}").json()
    assert (run["notes"], run["tags"]) == ("lr too high after step 40", ["old", "keep", "lr"])


def test_launch_clones_a_run_with_its_alerts(fresh_api, use_api, helpers):
    use_api(fresh_api)
    rid = failed_run_with_alert(fresh_api, helpers)
    with helpers.session_scope(fresh_api.db_url) as s:
        run = s.get(Run, rid)
        run.config = {**run.config, "steps": 7, "kl_coef": 0.01}  # kl_coef is on the form; others keep theirs
        run.tags = ["ladder"]
    at = open_page("launch", {"clone": str(rid)})
    no_errors(at)
    assert f"Cloning run #{rid}" in texts(at.info)
    assert at.selectbox(key="launch_method").value == "grpo" and at.number_input(key="f_steps").value == 7
    assert at.text_area(key="f_alerts_rules").value == "grad_norm_above=5:stop\nfailed"
    assert at.text_input(key="f_tags").value == "ladder"
    at.button[0].click().run()
    no_errors(at)
    [(new, _)] = fresh_api.enqueued
    cfg = httpx.get(f"{fresh_api.url}/api/runs/{new}").json()["config"]
    assert new != rid and (cfg["method"], cfg["steps"], cfg["kl_coef"]) == ("grpo", 7, 0.01)
    assert [r["kind"] for r in cfg["alerts"]["rules"]] == ["grad_norm_above", "failed"]


def test_launch_sends_alert_rules_and_trackers_and_explains_bad_rules(fresh_api, use_api):
    use_api(fresh_api)
    at = open_page("launch")
    at.text_area(key="f_alerts_rules").set_value("nan_loss:stop\nbogus rule!")
    at.button[0].click().run()
    assert len(at.error) == 1 and "bogus rule!" in texts(at.error) and "grad_norm_above=50:stop" in texts(at.error)
    assert fresh_api.enqueued == []
    at.text_area(key="f_alerts_rules").set_value("nan_loss:stop\neval_target=0.8:notify_stop")
    at.multiselect(key="f_trackers").set_value(["tensorboard"])
    at.button[0].click().run()
    no_errors(at)
    [(new, _)] = fresh_api.enqueued
    cfg = httpx.get(f"{fresh_api.url}/api/runs/{new}").json()["config"]
    assert [(r["kind"], r["action"]) for r in cfg["alerts"]["rules"]] == [("nan_loss", "stop"), ("eval_target", "notify_stop")]
    assert cfg["trackers"] == ["tensorboard"]
    at.text_input(key="f_alerts_webhook").set_value("https://hooks.example.com/x")
    at.button[0].click().run()
    assert "AERO_WEBHOOK_HOSTS" in texts(at.error) and len(fresh_api.enqueued) == 1  # the operator allows no host
