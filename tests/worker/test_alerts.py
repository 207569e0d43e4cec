"""Alerts on the worker (worker/alerts.py) against a real local HTTP server and the real store
(SQLite and PostgreSQL): webhook delivery (JSON posted, redirects not followed, hosts outside the
allowlist refused, timeouts), fired rules recorded once per run, and a real training run that a
rule stops with a checkpoint, fails with its stop reason, and resumes to the end."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from backend.db import alerts as alert_repo
from backend.db import runs as repo
from backend.db.models import Checkpoint, Run, StepMetric
from backend.db.session import session_scope
from backend.settings import Settings
from trainer.spec.alerts import AlertsConfig
from trainer.spec.operator_policy import RunPolicy
from worker.alerts import AlertSink, post_webhook
from worker.runner import execute_run
from worker.settings import WorkerSettings

WS = WorkerSettings(stale_after_s=60.0, heartbeat_s=5.0, max_attempts=3)


class Receiver:
    """A webhook receiver on 127.0.0.1: /hook answers 204 and keeps the JSON bodies; /redirect
    answers 302 to /hook; /slow answers after 3 s."""

    def __init__(self):
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", "/hook")
                    self.end_headers()
                    return
                if self.path == "/slow":
                    time.sleep(3)
                outer.bodies.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path="/hook"):
        return f"http://{self.host}{path}"


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.server.shutdown()


def test_post_webhook_posts_json_and_refuses_what_the_operator_did_not_allow(receiver):
    allowed = (receiver.host,)
    assert post_webhook(receiver.url(), {"text": "hi", "n": 1}, allowed) == "posted: HTTP 204"
    assert receiver.bodies == [{"text": "hi", "n": 1}]
    assert post_webhook(receiver.url("/redirect"), {"x": 1}, allowed) == "failed: HTTP 302 (redirects are not followed)"
    assert post_webhook(receiver.url(), {"x": 2}, ("127.0.0.1:1",)).startswith("refused: the host is not")
    assert post_webhook(receiver.url(), {"x": 3}, ()).startswith("refused")
    assert post_webhook("http://u:p@" + receiver.host + "/hook", {"x": 4}, allowed).startswith("refused: the webhook URL")
    assert receiver.bodies == [{"text": "hi", "n": 1}]  # nothing else reached the server
    assert post_webhook(receiver.url("/slow"), {"x": 5}, allowed, timeout_s=0.5).startswith("failed: ReadTimeout")
    assert post_webhook("http://127.0.0.1:1/hook", {}, ("127.0.0.1:1",)).startswith("failed: ConnectError")


def test_alert_sink_records_posts_stops_and_never_fires_a_rule_twice(db_url, make_run, receiver):
    rid = make_run()
    alerts = AlertsConfig(webhook_url=receiver.url(), rules=[
        {"kind": "grad_norm_above", "threshold": 1.0, "action": "notify_stop"},
        {"kind": "nan_loss"}, {"kind": "eval_target", "threshold": 0.5, "action": "stop"}])
    stops = []
    sink = AlertSink(db_url, rid, "my run", alerts, (receiver.host,), stops.append)
    sink.log(1, {"train/grad_norm": 0.5, "loss/total": 0.1})
    assert receiver.bodies == [] and stops == []
    sink.log(2, {"train/grad_norm": 3.0, "loss/total": float("nan")})
    sink.log_eval(2, {"overall": {"avg_at_k": 0.6}})
    assert [(a.kind, a.step) for a in stops] == [("grad_norm_above", 2)]  # the first stop asks; later ones are kept
    assert [b["kind"] for b in receiver.bodies] == ["grad_norm_above", "nan_loss"]  # the eval rule only stops
    first = receiver.bodies[0]
    assert first["run_id"] == rid and first["stopped"] is True and first["value"] == 3.0
    assert first["text"].startswith(f"AERO Lab run #{rid} (my run): alert grad_norm_above and stopped the run")
    with session_scope(db_url) as s:
        events = [(e.rule, e.kind, e.step, e.stopped, e.delivery) for e in alert_repo.list_alerts(s, rid)]
    assert events == [(0, "grad_norm_above", 2, True, "posted: HTTP 204"), (1, "nan_loss", 2, False, "posted: HTTP 204"),
                      (2, "eval_target", 2, True, "")]
    again = AlertSink(db_url, rid, "my run", alerts, (receiver.host,), stops.append)  # a resumed attempt
    again.log(3, {"train/grad_norm": 9.0, "loss/total": float("nan")})
    assert len(receiver.bodies) == 2 and len(stops) == 1


def test_a_rule_stops_a_real_run_with_a_checkpoint_and_the_run_resumes(pg_url, tmp_path, receiver):
    from tests.worker.conftest import tiny_config

    rules = [{"kind": "grad_norm_above", "threshold": 0.0, "action": "notify_stop"}, {"kind": "failed"},
             {"kind": "finished"}]
    cfg = tiny_config(steps=4, checkpoint_every=0, alerts={"webhook_url": receiver.url(), "rules": rules},
                      trackers=["tensorboard"])
    with session_scope(pg_url) as s:
        rid = repo.create_run(s, cfg, queue="cpu", name="stopper").id
    settings = Settings(data_dir=tmp_path, database_url=pg_url, policy=RunPolicy(webhook_hosts=(receiver.host,)))
    assert execute_run(rid, settings, WS) == "failed"
    with session_scope(pg_url) as s:
        run = s.get(Run, rid)
        status, error, reason = run.status, run.error, run.stop_reason
        ckpts = [c.step for c in s.query(Checkpoint).filter_by(run_id=rid)]
        steps = sorted(m.step for m in s.query(StepMetric).filter_by(run_id=rid))
    assert status == "failed" and reason.startswith("alert rule 0 (grad_norm_above)")
    assert error.startswith("Stopped early by alert rule 0 (grad_norm_above)") and "resume" in error
    assert steps == [1] and ckpts == [1]  # stopped at the next step boundary, with a checkpoint
    assert [b["kind"] for b in receiver.bodies] == ["grad_norm_above", "failed"]
    with session_scope(pg_url) as s:
        repo.resume_run(s, rid)
    assert execute_run(rid, settings, WS) == "succeeded"  # the rule fired once: it does not stop the resume
    with session_scope(pg_url) as s:
        run = s.get(Run, rid)
        assert (run.status, run.stop_reason, run.error) == ("succeeded", None, None)
        assert sorted(m.step for m in s.query(StepMetric).filter_by(run_id=rid)) == [1, 2, 3, 4]
    assert [b["kind"] for b in receiver.bodies] == ["grad_norm_above", "failed", "finished"]
    # the run's tracker saw both attempts: TensorBoard holds each step once, the final eval too
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "runs" / str(rid) / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("reward/mean")] == [1, 2, 3, 4]
    assert [e.step for e in acc.Scalars("eval/overall/avg_at_k")] == [4]


def test_an_eval_target_stop_succeeds_and_records_its_reason(db_url, make_run):
    from trainer.spec.alerts import Alert
    from worker.alerts import early_stop_outcome

    rid = make_run()
    with session_scope(db_url) as s:
        repo.claim_run(s, rid, "w1")
    hit = Alert(0, "eval_target", 10, 0.7, "held-out Avg@k of overall = 0.7000 at step 10 reached the target 0.6",
                notify=False, stop=True)
    assert early_stop_outcome(db_url, rid, "w1", hit) == ("succeeded", None)
    nan = Alert(1, "nan_loss", 11, None, "loss/total is not finite at step 11", notify=False, stop=True)
    status, error = early_stop_outcome(db_url, rid, "w1", nan)
    assert status == "failed" and "nan_loss" in error
    with session_scope(db_url) as s:
        assert s.get(Run, rid).stop_reason == "alert rule 1 (nan_loss): loss/total is not finite at step 11"
