"""`aero runs` (a run waiting for its GPUs), `aero resume | clone | note | alerts | export` and
`aero submit --alert/--webhook/--tracker`
against a live API (the real app under uvicorn on a temp SQLite store; runs are recorded
instead of sent to a broker)."""

import re
import threading
import time
from datetime import timedelta

import pytest
import uvicorn
from rich.console import Console
from sqlalchemy import update
from typer.testing import CliRunner

import cli.submit_cmds

from backend.db.alerts import record_alert, set_stop_reason
from backend.db.metrics import upsert_eval_results, upsert_step_metrics
from backend.db.migrate import migrate
from backend.db.models import Run, utcnow
from backend.db.runs import claim_run, create_run, mark_failed, mark_succeeded, record_placement
from backend.db.session import get_engine, session_scope
from backend.db.tokens import create_token
from backend.main import create_app
from backend.settings import Settings
from cli.main import app
from trainer.spec.config import RunConfig
from trainer.spec.config_renames import ConfigDeprecationWarning

runner = CliRunner()


@pytest.fixture
def api(tmp_path):
    url = f"sqlite:///{tmp_path / 'aero.sqlite'}"
    migrate(url)
    with session_scope(url) as s:
        _, token = create_token(s, "cli-tests")
    sent: list = []
    server = uvicorn.Server(uvicorn.Config(create_app(Settings(database_url=url, data_dir=tmp_path / "data",
                                                               migrate_on_start=False),
                                                      enqueue=lambda rid, q: sent.append(rid)),
                                           host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield {"url": url, "opts": ["--api", f"http://127.0.0.1:{port}", "--token", token], "sent": sent}
    server.should_exit = True
    thread.join(timeout=10)
    get_engine(url).dispose()


def add_run(url, status="failed", **cfg):
    with session_scope(url) as s:
        rid = create_run(s, RunConfig(method="grpo", steps=3, **cfg).model_dump(mode="json"), queue="cpu", tags=["t1"]).id
        if status != "queued":
            claim_run(s, rid, "w")
            (mark_failed(s, rid, "boom", worker="w") if status == "failed" else mark_succeeded(s, rid, worker="w"))
    return rid


def aero(api, *args):
    return runner.invoke(app, [*args, *api["opts"]], catch_exceptions=False)


def get(api, rid):
    import httpx

    return httpx.get(f"{api['opts'][1]}/api/runs/{rid}").json()


def test_resume_and_its_conflict(api):
    failed, done = add_run(api["url"]), add_run(api["url"], status="succeeded")
    res = aero(api, "resume", str(failed))
    assert res.exit_code == 0 and "queued again" in res.output
    assert get(api, failed)["status"] == "queued" and api["sent"] == [failed]
    res = aero(api, "resume", str(done))
    assert res.exit_code == 1 and "409" in res.output and "only a failed or cancelled run resumes" in res.output


def test_clone_keeps_the_config_and_applies_sets(api):
    src = add_run(api["url"], kl_coef=0.01, alerts={"rules": [{"kind": "nan_loss", "action": "stop"}]})
    res = aero(api, "clone", str(src), "--set", "steps=5", "--set", "seed=3")
    assert res.exit_code == 0, res.output
    (new,) = api["sent"]
    cfg = get(api, new)["config"]
    assert (cfg["method"], cfg["steps"], cfg["seed"], cfg["kl_coef"]) == ("grpo", 5, 3, 0.01)
    assert cfg["alerts"]["rules"][0]["kind"] == "nan_loss" and get(api, new)["tags"] == ["t1"]
    assert aero(api, "clone", str(src), "--set", "steps=0").exit_code == 1  # the API's 422


def test_clone_with_a_former_field_sets_the_rollout_block(api):
    """``--set rollout_engine=vllm`` is ``--set rollout.sampler=vllm`` with a deprecation warning,
    so it overrides the stored config's sampler instead of contradicting it."""
    src = add_run(api["url"])
    assert get(api, src)["config"]["rollout"]["sampler"] == "hf"
    with pytest.warns(ConfigDeprecationWarning, match="use rollout.sampler"):
        res = aero(api, "clone", str(src), "--set", "rollout_engine=vllm")
    assert res.exit_code == 0, res.output
    (new,) = api["sent"]
    assert get(api, new)["config"]["rollout"]["sampler"] == "vllm" and "rollout_engine" not in get(api, new)["config"]


def test_note_replaces_notes_and_tags(api):
    rid = add_run(api["url"])
    assert aero(api, "note", str(rid), "--notes", "diverged at 40", "--add-tag", "lr").exit_code == 0
    assert (get(api, rid)["notes"], get(api, rid)["tags"]) == ("diverged at 40", ["t1", "lr"])
    assert aero(api, "note", str(rid), "--tags", "a, b").exit_code == 0 and get(api, rid)["tags"] == ["a", "b"]
    assert aero(api, "note", str(rid)).exit_code == 2


def test_alerts_lists_fired_rules_and_the_stop_reason(api):
    rid = add_run(api["url"], status="queued", alerts={"rules": [{"kind": "grad_norm_above", "threshold": 5.0,
                                                                     "action": "stop"}]})
    with session_scope(api["url"]) as s:
        record_alert(s, rid, rule=0, kind="grad_norm_above", step=3, value=7.5, message="[red]7.5[/]", stopped=True)
        claim_run(s, rid, "w")
        set_stop_reason(s, rid, "alert rule 0 (grad_norm_above)", "w")
    res = aero(api, "alerts", str(rid))
    assert res.exit_code == 0 and "[red]7.5[/]" in res.output  # user text printed, not read as markup
    assert "stopped early" in res.output and "alert rule 0 (grad_norm_above)" in res.output


def test_export_to_tensorboard_and_mlflow(api, tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    rid = add_run(api["url"])
    with session_scope(api["url"]) as s:
        upsert_step_metrics(s, rid, {1: {"reward/mean": 0.25}, 2: {"reward/mean": 0.5, "train/grad_norm": 1.0}})
        upsert_eval_results(s, rid, 2, {"overall": {"n": 4, "k": 4, "avg_at_k": 0.4, "pass_at_k": 0.6}})
    res = aero(api, "export", str(rid), "--to", "tensorboard", "--out", str(tmp_path / "tb"))
    assert res.exit_code == 0, res.output
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb" / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("reward/mean")] == [(1, 0.25), (2, 0.5)]
    assert [e.step for e in acc.Scalars("eval/overall/avg_at_k")] == [2]
    res = aero(api, "export", str(rid), "--to", "mlflow", "--out", str(tmp_path / "ml"))
    assert res.exit_code == 0 and "mlflow ui --backend-store-uri sqlite:///" in res.output
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'ml' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("aero-lab").experiment_id])
    assert [m.value for m in client.get_metric_history(run.info.run_id, "reward/mean")] == [0.25, 0.5]


def test_submit_takes_alerts_webhook_and_trackers(api):
    res = aero(api, "submit", "-m", "grpo", "--set", "steps=3", "--alert", "nan_loss:stop", "--alert",
               "eval_target=0.7@overall:notify_stop", "--tracker", "tensorboard,mlflow")
    assert res.exit_code == 0, res.output
    cfg = get(api, api["sent"][-1])["config"]
    assert [(r["kind"], r["action"]) for r in cfg["alerts"]["rules"]] == [("nan_loss", "stop"), ("eval_target", "notify_stop")]
    assert cfg["trackers"] == ["tensorboard", "mlflow"]
    bad = aero(api, "submit", "-m", "grpo", "--alert", "nan loss")
    assert bad.exit_code == 2 and "--alert" in bad.output
    hook = aero(api, "submit", "-m", "grpo", "--webhook", "https://hooks.example.com/x", "--alert", "failed")
    assert hook.exit_code == 1 and "AERO_WEBHOOK_HOSTS" in hook.output  # the operator allows no host here


def test_a_clone_that_changes_the_task_leaves_the_old_tasks_section_behind():
    """A stored code run carries its ``code`` block; ``--set task=math`` clones it without it
    (the math task has none and would refuse it), unless the sets give the block themselves."""
    from cli.run_cmds import cloned

    code_run = RunConfig(method="grpo", task="code", preset=None, model_path="/m", train_data="/d.jsonl",
                         code={"memory_mb": 512}).model_dump(mode="json")
    math = cloned(code_run, {"task": "math"})
    assert "code" not in math and math["task"] == "math" and math["model_path"] == "/m"
    RunConfig.model_validate(math)  # parses: no stray block
    assert cloned(code_run, {"steps": 5})["code"]["memory_mb"] == 512  # same task: the block stays
    kept = cloned(code_run, {"task": "math", "code.memory_mb": 256})  # the sets give it: kept, and refused
    assert kept["code"]["memory_mb"] == 256


def test_runs_shows_a_run_waiting_for_its_gpus_as_waiting(api, monkeypatch):
    """A claimed run that waits for its GPUs reads 'waiting', for how long and for what, in `aero
    runs`; `--status waiting` lists only such runs."""
    monkeypatch.setattr(cli.submit_cmds, "out", Console(color_system=None, width=250))  # no folded cells
    placed, waiting, queued = add_run(api["url"], "queued"), add_run(api["url"], "queued"), add_run(api["url"], "queued")
    text = "1 GPU(s): 0 of this worker's node's 2 free"
    with session_scope(api["url"]) as s:
        for rid in (placed, waiting):
            claim_run(s, rid, "w")
        record_placement(s, waiting, "w", waiting_for=text)
        s.execute(update(Run).where(Run.id == waiting).values(waiting_since=utcnow() - timedelta(minutes=3, seconds=5)))
    res = aero(api, "runs")
    assert res.exit_code == 0, res.output
    rows = {int(m.group(1)): m.group(0) for m in re.finditer(r"^│ +(\d+) │.*$", res.output, re.M)}
    assert re.search(r"waiting 3m 0\ds", rows[waiting]) and text in rows[waiting] and "waits for" in res.output
    assert " running " in rows[placed] and "waiting" not in rows[placed] and " queued " in rows[queued]
    res = aero(api, "runs", "--status", "waiting")
    assert res.exit_code == 0 and "1 of 1 run(s)" in res.output and text in res.output
    assert re.findall(r"^│ +(\d+) │", res.output, re.M) == [str(waiting)]
