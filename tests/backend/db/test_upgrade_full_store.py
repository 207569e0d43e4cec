"""A store filled at the first migration (0001) with runs of several methods, a sweep, step
metrics, evaluations, checkpoints and tokens, upgraded to head on SQLite and PostgreSQL: every
row is still there with its values, the columnar metric copy that a later migration builds
answers what the step log holds, the old tokens still authenticate, and the stored configs
parse under today's RunConfig. (Users, audit rows and rollout samples have no table at 0001:
later migrations create them; tests/backend/test_backup.py round-trips a head store's rows.)"""

from __future__ import annotations

import json

from sqlalchemy import text

from backend.db.metrics import list_evals, read_step_metrics
from backend.db.migrate import migrate
from backend.db.models import Checkpoint, Run, Sweep
from backend.db.session import get_engine, make_sessionmaker
from backend.db.tokens import hash_token, verify_token
from trainer.spec.config import parse_run_config

METHODS = {1: "grpo", 2: "aero", 3: "dapo"}
STATUS = {1: "succeeded", 2: "running", 3: "queued"}
EVERY_SECTION = {"aero": {"n_explore": 4}, "dapo": {"eps_high": 0.3}}  # configs stored before 0005 carry all


def metrics_of(run: int, step: int) -> dict:
    return {"loss/total": round(1.0 / (run + step), 6), "time/step_s": 0.1 * step, "reward/mean": step / 10}


def fill_at_0001(url: str) -> None:
    with get_engine(url).begin() as conn:
        conn.execute(text("INSERT INTO sweeps (id, name, spec, created_at) VALUES (1, 's', :spec, CURRENT_TIMESTAMP)"),
                     {"spec": json.dumps({"methods": ["grpo", "aero"], "seeds": [0]})})
        for run, method in METHODS.items():
            config = {"method": method, "preset": "tiny", "steps": 10, **EVERY_SECTION}
            conn.execute(text(
                "INSERT INTO runs (id, name, method, engine, config, status, queue, progress, current_step, total_steps, "
                "tags, notes, cancel_requested, attempts, created_at, sweep_id) VALUES (:id, :name, :m, 'embedded', "
                ":config, :status, 'cpu', 0.5, 4, 10, :tags, :notes, false, 1, CURRENT_TIMESTAMP, :sweep)"),
                {"id": run, "name": f"run {run}", "m": method, "config": json.dumps(config), "status": STATUS[run],
                 "tags": json.dumps([method, "old"]), "notes": f"note {run}", "sweep": 1 if run < 3 else None})
            for step in range(1, 5):
                conn.execute(text("INSERT INTO step_metrics (run_id, step, metrics, logged_at) VALUES "
                                  "(:r, :s, :m, CURRENT_TIMESTAMP)"),
                             {"r": run, "s": step, "m": json.dumps(metrics_of(run, step))})
        conn.execute(text(
            "INSERT INTO eval_results (run_id, step, benchmark, n, k, avg_at_k, pass_at_k, per_problem, logged_at) "
            "VALUES (1, 4, 'overall', 8, 8, 0.25, 0.5, :pp, CURRENT_TIMESTAMP)"), {"pp": json.dumps([[8, 2], [8, 0]])})
        conn.execute(text("INSERT INTO checkpoints (run_id, step, path, created_at) VALUES "
                          "(1, 4, '/data/runs/1/checkpoints/step_000004', CURRENT_TIMESTAMP)"))
        for i, name in enumerate(["ci", "lab"]):
            conn.execute(text("INSERT INTO api_tokens (name, token_hash, created_at) VALUES (:n, :h, CURRENT_TIMESTAMP)"),
                         {"n": name, "h": hash_token(f"aero_old{i}")})


def test_a_store_filled_at_0001_upgrades_to_head_with_every_row(empty_db_url):
    migrate(empty_db_url, "0001")
    fill_at_0001(empty_db_url)
    migrate(empty_db_url)
    with make_sessionmaker(get_engine(empty_db_url))() as s:
        runs = {r.id: r for r in s.query(Run).all()}
        assert set(runs) == set(METHODS)
        for run_id, r in runs.items():
            assert (r.method, r.status, r.tags, r.notes, r.current_step, r.total_steps) == (
                METHODS[run_id], STATUS[run_id], [METHODS[run_id], "old"], f"note {run_id}", 4, 10)
            assert parse_run_config(r.config).method == METHODS[run_id]  # 0005 kept each method's own sections
            cols = read_step_metrics(s, run_id, ["loss/total", "reward/mean"])  # the columnar copy (0004)
            assert cols.steps == [1, 2, 3, 4]
            assert cols.series["loss/total"] == [metrics_of(run_id, k)["loss/total"] for k in range(1, 5)]
            assert cols.series["reward/mean"] == [metrics_of(run_id, k)["reward/mean"] for k in range(1, 5)]
            everything = read_step_metrics(s, run_id)
            assert everything.series["time/step_s"] == [metrics_of(run_id, k)["time/step_s"] for k in range(1, 5)]
        assert runs[1].sweep_id == runs[2].sweep_id == 1 and s.get(Sweep, 1).spec["methods"] == ["grpo", "aero"]
        [ev] = list_evals(s, 1)
        assert (ev.step, ev.benchmark, ev.avg_at_k, ev.pass_at_k, ev.per_problem) == (4, "overall", 0.25, 0.5,
                                                                                     [[8, 2], [8, 0]])
        assert [c.path for c in s.query(Checkpoint).all()] == ["/data/runs/1/checkpoints/step_000004"]
        assert verify_token(s, "aero_old0").role == verify_token(s, "aero_old1").role == "admin"  # 0006
