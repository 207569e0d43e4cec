"""GET /api/runs/{id}/metrics/stream against a real uvicorn server in a thread: rows inserted
while a client streams arrive as live events, each step once and in order, and the stream
ends after the run finishes."""

import json
import socket
import threading
import time

import httpx
import pytest
import uvicorn

from backend.db import runs as repo
from backend.db.metrics import upsert_step_metrics
from backend.db.session import get_engine, make_sessionmaker
from backend.main import create_app
from trainer.spec.config import RunConfig

pytestmark = pytest.mark.timing  # wall-clock budgets: `make test` runs these one at a time


def serve(app):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    t = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    deadline = time.time() + 10
    while not srv.started and time.time() < deadline:
        time.sleep(0.02)
    assert srv.started
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        srv.should_exit = True
        t.join(10)


@pytest.fixture
def server(make_settings, enqueued):
    yield from serve(create_app(make_settings(sse_poll_s=0.05), enqueue=enqueued))


def read_events(response):
    """Parse a text/event-stream into dicts {event, id, data} (comments and pings skipped)."""
    event: dict = {}
    for line in response.iter_lines():
        if line == "":
            if "data" in event:
                yield event
            event = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            event[field] = value[1:] if value.startswith(" ") else value


def test_stream_delivers_steps_as_they_land_then_ends(server, db):
    sm = make_sessionmaker(get_engine(db))
    with sm() as s:
        run = repo.create_run(s, RunConfig(steps=6).model_dump(mode="json"), queue="cpu")
        upsert_step_metrics(s, run.id, {1: {"loss": 1.0, "x": 0}})
        s.commit()
        run_id = run.id
    inserted_at: dict[int, float] = {}

    def worker():
        with sm() as s:
            repo.claim_run(s, run_id, "w")
            s.commit()
            for step in range(2, 7):
                time.sleep(0.15)
                upsert_step_metrics(s, run_id, {step: {"loss": 1.0 / step, "x": step}})
                repo.record_progress(s, run_id, step, 6)
                s.commit()
                inserted_at[step] = time.monotonic()
            time.sleep(0.1)
            repo.mark_succeeded(s, run_id)
            s.commit()

    events, received_at = [], {}
    with httpx.Client(base_url=server, timeout=20) as c:
        with c.stream("GET", f"/api/runs/{run_id}/metrics/stream?keys=loss") as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            threading.Thread(target=worker, daemon=True).start()
            for ev in read_events(r):
                events.append(ev)
                if ev.get("event") == "metrics":
                    received_at[int(ev["id"])] = time.monotonic()
    steps = [json.loads(e["data"])["step"] for e in events if e.get("event") == "metrics"]
    assert steps == [1, 2, 3, 4, 5, 6]  # every step once, in order
    assert [e["id"] for e in events if e.get("event") == "metrics"] == ["1", "2", "3", "4", "5", "6"]
    assert json.loads(events[0]["data"]) == {"step": 1, "metrics": {"loss": 1.0}}  # only the asked key
    # live: step 2 reached the client before the worker wrote step 6
    assert received_at[2] < inserted_at[6]
    statuses = [json.loads(e["data"])["status"] for e in events if e.get("event") == "status"]
    assert statuses[0] == "queued" and "running" in statuses and statuses[-1] == "succeeded"
    assert events[-1]["event"] == "end" and json.loads(events[-1]["data"]) == {"status": "succeeded", "last_step": 6}


def test_stream_resumes_after_last_event_id_and_ends_at_once_for_finished_runs(server, db):
    sm = make_sessionmaker(get_engine(db))
    with sm() as s:
        run = repo.create_run(s, RunConfig().model_dump(mode="json"), queue="cpu")
        upsert_step_metrics(s, run.id, {i: {"a": i} for i in range(1, 6)})
        repo.request_cancel(s, run.id)
        s.commit()
    with httpx.Client(base_url=server, timeout=20) as c:
        with c.stream("GET", f"/api/runs/{run.id}/metrics/stream", headers={"Last-Event-ID": "3"}) as r:
            events = list(read_events(r))
        assert [json.loads(e["data"])["step"] for e in events if e.get("event") == "metrics"] == [4, 5]
        assert events[-1]["event"] == "end"
        with c.stream("GET", f"/api/runs/{run.id}/metrics/stream?since_step=4") as r:
            assert [e["id"] for e in read_events(r) if e.get("event") == "metrics"] == ["5"]
        assert c.get("/api/runs/999999/metrics/stream").status_code == 404


def test_store_changes_wake_the_stream_without_waiting_for_its_poll(make_settings, enqueued, db):
    """With a 30 s poll, only a change signal can deliver a step within seconds: PostgreSQL's
    LISTEN/NOTIFY, SQLite's data_version watcher. Each step and the final status arrive promptly."""
    sm = make_sessionmaker(get_engine(db))
    with sm() as s:
        run = repo.create_run(s, RunConfig(steps=4).model_dump(mode="json"), queue="cpu")
        repo.claim_run(s, run.id, "w")
        s.commit()
        run_id = run.id
    lag: list[float] = []
    written: dict[int, float] = {}

    def worker():
        time.sleep(0.5)  # the stream has subscribed and read the store once
        with sm() as s:
            for step in range(1, 5):
                upsert_step_metrics(s, run_id, {step: {"loss": 1.0 / step}})
                repo.record_progress(s, run_id, step, 4)
                written[step] = time.monotonic()  # before the commit: its event cannot come sooner
                s.commit()
                time.sleep(0.3)
            repo.mark_succeeded(s, run_id)
            s.commit()

    started = time.monotonic()
    app = create_app(make_settings(sse_poll_s=30), enqueue=enqueued)
    for url in serve(app):
        with httpx.Client(base_url=url, timeout=20) as c, c.stream("GET", f"/api/runs/{run_id}/metrics/stream") as r:
            threading.Thread(target=worker, daemon=True).start()
            for ev in read_events(r):
                if ev.get("event") == "metrics":
                    lag.append(time.monotonic() - written[int(ev["id"])])
                if ev.get("event") == "end":
                    break
        listener = app.state.run_changes.task  # the last stream has ended: the listener stops
        deadline = time.monotonic() + 10
        while not listener.done() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listener.done()
    assert len(lag) == 4 and max(lag) < 5, lag  # a poll would have taken 30 s
    assert time.monotonic() - started < 30
