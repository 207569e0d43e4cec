"""Alembic: upgrade head on an empty database creates exactly the models' schema (an
autogenerate comparison finds nothing), and downgrade removes it, on SQLite and PostgreSQL."""

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from backend.db.migrate import alembic_config, downgrade, migrate
from backend.db.models import Base
from backend.db.session import get_engine

TABLES = {"runs", "step_metrics", "metric_chunks", "metric_series", "eval_results", "sweeps", "api_tokens", "checkpoints",
          "users", "audit_log", "step_details", "alert_events"}


def _diff(url):
    with get_engine(url).connect() as conn:
        return compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)


def insert_queued_runs(conn, stored: dict) -> None:
    """Queued runs with the given stored configs (run id -> config), written as an older
    revision's store holds them (plain inserts, no model validation)."""
    from sqlalchemy import insert

    from tests.stores import old_runs_table

    for run_id, config in stored.items():
        conn.execute(insert(old_runs_table()).values(
            id=run_id, name=f"r{run_id}", method=config["method"], engine="embedded", config=config, status="queued",
            queue="cpu", progress=0.0, current_step=0, total_steps=0, tags=[], notes="", cancel_requested=False,
            attempts=0))


def test_upgrade_head_creates_schema_with_no_autogenerate_diff(empty_db_url):
    assert set(inspect(get_engine(empty_db_url)).get_table_names()) == set()
    migrate(empty_db_url)
    assert set(inspect(get_engine(empty_db_url)).get_table_names()) == TABLES | {"alembic_version"}
    assert _diff(empty_db_url) == []
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    with get_engine(empty_db_url).connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == head
    migrate(empty_db_url)  # idempotent
    assert _diff(empty_db_url) == []
    with get_engine(empty_db_url).connect() as conn:
        command.check(alembic_config(conn))  # `alembic check`: raises if autogenerate would emit anything


def test_downgrade_base_removes_every_table(empty_db_url):
    migrate(empty_db_url)
    downgrade(empty_db_url, "base")
    assert set(inspect(get_engine(empty_db_url)).get_table_names()) <= {"alembic_version"}
    assert {d[1].name for d in _diff(empty_db_url) if d[0] == "add_table"} == TABLES  # all would be added again


def test_step_metrics_unique_on_run_and_step(empty_db_url):
    migrate(empty_db_url)
    pk = inspect(get_engine(empty_db_url)).get_pk_constraint("step_metrics")
    assert pk["constrained_columns"] == ["run_id", "step"]


def test_postgres_compresses_metrics_with_lz4(empty_db_url):
    from sqlalchemy import text

    migrate(empty_db_url)
    engine = get_engine(empty_db_url)
    if engine.dialect.name != "postgresql":
        return
    with engine.connect() as conn:
        method = conn.execute(text("SELECT attcompression FROM pg_attribute WHERE attrelid = 'step_metrics'::regclass "
                                   "AND attname = 'metrics'")).scalar()
    assert method == "l"


def test_migration_0005_keeps_only_the_sections_each_runs_method_reads(empty_db_url):
    """Configs stored before 0005 carry every method's section; after it each keeps its own, so
    the stricter RunConfig still parses them (a queued run from before still starts)."""
    from sqlalchemy import select

    from backend.db.models import Run
    from trainer.spec.config import parse_run_config

    migrate(empty_db_url, "0004")
    every = {"aero": {"n_explore": 4}, "aero_mem": {"gamma": 0.9}, "dapo": {"eps_high": 0.3}}
    stored = {1: {"method": "grpo", **every}, 2: {"method": "aero", **every}, 3: {"method": "dapo", **every},
              4: {"method": "aero-mem-d", "train_size": 8, **every}, 5: {"method": "gone", **every}}
    with get_engine(empty_db_url).begin() as conn:
        insert_queued_runs(conn, stored)
    migrate(empty_db_url)
    with get_engine(empty_db_url).connect() as conn:
        got = dict(conn.execute(select(Run.__table__.c.id, Run.__table__.c.config)).all())
    assert {k for k in got[1] if k in every} == set()
    assert {k for k in got[2] if k in every} == {"aero"} and got[2]["aero"] == {"n_explore": 4}
    assert {k for k in got[3] if k in every} == {"dapo"}
    assert {k for k in got[4] if k in every} == {"aero", "aero_mem"}
    assert got[5] == stored[5]  # a method the migration does not know is left as it was
    for run_id in (1, 2, 3, 4):
        assert parse_run_config(got[run_id]).method == stored[run_id]["method"]


def test_migration_0006_makes_existing_tokens_admin_tokens_of_their_own_users(empty_db_url):
    """Tokens from before users and roles were all-powerful: each becomes an admin token of a
    user named like it (two tokens of one name share the user); runs keep no owner (unknown);
    downgrade removes the columns and keeps the runs and their metrics."""
    from sqlalchemy import select, text

    from backend.db.models import ApiToken, Run, StepMetric, User
    from backend.db.tokens import hash_token, verify_token
    from backend.db.session import make_sessionmaker

    migrate(empty_db_url, "0005")
    with get_engine(empty_db_url).begin() as conn:
        for i, name in enumerate(["ci", "ci", "admin (aero up)"]):
            conn.execute(text("INSERT INTO api_tokens (name, token_hash, created_at) VALUES (:n, :h, CURRENT_TIMESTAMP)"),
                         {"n": name, "h": hash_token(f"aero_old{i}")})
        conn.execute(text("INSERT INTO runs (id, name, method, engine, config, status, queue, progress, current_step, "
                          "total_steps, tags, notes, cancel_requested, attempts, created_at, metrics_version) VALUES "
                          "(7, 'r', 'grpo', 'embedded', '{}', 'succeeded', 'cpu', 1, 2, 2, '[]', '', false, 1, "
                          "CURRENT_TIMESTAMP, 0)"))
        conn.execute(text("INSERT INTO step_metrics (run_id, step, metrics, logged_at) VALUES (7, 1, '{}', CURRENT_TIMESTAMP)"))
    migrate(empty_db_url)
    with make_sessionmaker(get_engine(empty_db_url))() as s:
        users = {u.name: u.id for u in s.scalars(select(User))}
        assert set(users) == {"ci", "admin (aero up)"}
        tokens = list(s.scalars(select(ApiToken).order_by(ApiToken.id)))
        assert [(t.role, t.user_id) for t in tokens] == [("admin", users["ci"])] * 2 + [("admin", users["admin (aero up)"])]
        assert verify_token(s, "aero_old0").role == "admin"  # the old token still works, as an admin
        assert s.get(Run, 7).owner is None
    downgrade(empty_db_url, "0005")
    with get_engine(empty_db_url).connect() as conn:
        assert conn.execute(select(StepMetric.__table__.c.run_id)).all() == [(7,)]  # nothing cascaded away
        assert "owner" not in {c["name"] for c in inspect(conn).get_columns("runs")}
        assert "role" not in {c["name"] for c in inspect(conn).get_columns("api_tokens")}
    migrate(empty_db_url)
    assert _diff(empty_db_url) == []


def test_migration_0009_drops_the_code_sections_operator_fields_from_stored_configs(empty_db_url):
    """Configs stored before the operator's policy carry the sandbox's network, uid and
    interpreter in ``code``; RunConfig refuses those now, so 0009 drops them (runs and sweeps)."""
    from sqlalchemy import insert, select

    from backend.db.models import Run, Sweep
    from trainer.spec.config import ConfigError, parse_run_config

    migrate(empty_db_url, "0008")
    old_code = {"network": "auto", "run_as_uid": 65534, "python": None, "workers": 2}
    stored = {1: {"method": "grpo", "code": dict(old_code)}, 2: {"method": "aero", "seed": 4}}
    spec = {"base": {"code": dict(old_code)}, "methods": ["grpo"], "seeds": [0],
            "overrides": [{"code.network": "auto", "lr": 1e-5}, {"code": {"python": None}}], "tags": []}
    with pytest.raises(ConfigError, match="code.network: an operator setting"):
        parse_run_config(stored[1])
    with get_engine(empty_db_url).begin() as conn:
        insert_queued_runs(conn, stored)
        conn.execute(insert(Sweep.__table__).values(id=1, name="s", spec=spec))
    migrate(empty_db_url, "0009")  # 0013 later drops a non-code run's code block altogether
    with get_engine(empty_db_url).connect() as conn:
        got = dict(conn.execute(select(Run.__table__.c.id, Run.__table__.c.config)).all())
        got_spec = conn.execute(select(Sweep.__table__.c.spec)).scalar_one()
    assert got[1] == {"method": "grpo", "code": {"workers": 2}} and got[2] == stored[2]
    code_run = {"task": "code", "preset": None, "model_path": "/m", "train_data": "/d.jsonl"}
    assert parse_run_config({**got[1], **code_run}).code.workers == 2
    assert got_spec == {**spec, "base": {"code": {"workers": 2}}, "overrides": [{"lr": 1e-5}, {"code": {}}]}


def test_migration_0011_makes_grpo_runs_with_drgrpos_estimator_drgrpo_runs(empty_db_url):
    """Dr.GRPO has one route: a stored ``grpo`` run with ``adv_estimator=drgrpo`` is refused by
    the config now, so 0011 makes it the ``drgrpo`` run it trained as (method column included),
    with GRPO's loss aggregation written out; the config then parses and trains the same."""
    from sqlalchemy import select

    from backend.db.models import Run
    from trainer.spec.config import ConfigError, parse_run_config
    from trainer.methods.spec import get_method

    migrate(empty_db_url, "0010")
    stored = {1: {"method": "grpo", "adv_estimator": "drgrpo"},
              2: {"method": "grpo", "adv_estimator": "drgrpo", "loss_agg": "token-mean"},
              3: {"method": "grpo", "adv_estimator": "grpo"}, 4: {"method": "aero-s1s2", "adv_estimator": "drgrpo"}}
    with pytest.raises(ConfigError, match="adv_estimator: method grpo with adv_estimator=drgrpo is the drgrpo method"):
        parse_run_config(stored[1])
    before = {i: parse_run_config({**c, "method": "drgrpo"}) for i, c in stored.items() if i < 3}
    with get_engine(empty_db_url).begin() as conn:
        insert_queued_runs(conn, stored)
    migrate(empty_db_url)
    with get_engine(empty_db_url).connect() as conn:
        rows = {i: (m, c) for i, m, c in conn.execute(select(Run.__table__.c.id, Run.__table__.c.method,
                                                               Run.__table__.c.config)).all()}
    assert rows[1] == ("drgrpo", {"method": "drgrpo", "adv_estimator": "drgrpo", "loss_agg": "seq-mean-token-mean"})
    assert rows[2] == ("drgrpo", {**stored[2], "method": "drgrpo"})
    assert rows[3] == ("grpo", stored[3]) and rows[4] == ("aero-s1s2", stored[4])  # not Dr.GRPO's route: untouched
    for i in (1, 2):
        cfg = parse_run_config(rows[i][1])
        assert cfg.effective_loss_agg == (stored[i].get("loss_agg") or "seq-mean-token-mean")  # what it trained with
        assert not get_method(cfg.method).divides_by_std(cfg) and before[i].method == cfg.method


def test_migration_0012_renames_rollout_engine_to_sampler_in_stored_configs(empty_db_url):
    """``rollout_engine`` ("embedded" | "vllm") is ``sampler`` ("hf" | "vllm") now: 0012 rewrites
    stored runs and sweeps (base and overrides) to the new field, so they parse without the
    deprecation path; a downgrade writes the old field back."""
    import warnings

    from sqlalchemy import insert, select

    from backend.db.models import Run, Sweep
    from trainer.spec.config import parse_run_config

    migrate(empty_db_url, "0011")
    stored = {1: {"method": "grpo", "rollout_engine": "embedded", "seed": 3}, 2: {"method": "aero", "rollout_engine": "vllm"},
              3: {"method": "aero", "seed": 4}}
    spec = {"base": {"rollout_engine": "embedded", "steps": 5}, "methods": ["grpo"], "seeds": [0],
            "overrides": [{"rollout_engine": "vllm", "optim.lr": 1e-5}, {"optim": {"lr": 2e-5}}], "tags": []}
    with get_engine(empty_db_url).begin() as conn:
        insert_queued_runs(conn, stored)
        conn.execute(insert(Sweep.__table__).values(id=1, name="s", spec=spec))
    migrate(empty_db_url, "0012")

    def read():
        with get_engine(empty_db_url).connect() as conn:
            return (dict(conn.execute(select(Run.__table__.c.id, Run.__table__.c.config)).all()),
                    conn.execute(select(Sweep.__table__.c.spec)).scalar_one())

    got, got_spec = read()
    assert got == {1: {"method": "grpo", "seed": 3, "sampler": "hf"}, 2: {"method": "aero", "sampler": "vllm"},
                   3: stored[3]}
    assert got_spec == {**spec, "base": {"steps": 5, "sampler": "hf"},
                        "overrides": [{"optim.lr": 1e-5, "sampler": "vllm"}, {"optim": {"lr": 2e-5}}]}
    migrate(empty_db_url)  # and on to the rollout block (0017)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new fields: no deprecation warning
        assert [parse_run_config(read()[0][i]).rollout.sampler for i in (1, 2)] == ["hf", "vllm"]
    downgrade(empty_db_url, "0011")
    assert read() == (stored, spec)


def test_migration_0013_drops_the_code_block_from_stored_configs_of_other_tasks(empty_db_url):
    """Every config stored before carries a ``code`` block; it is the code task's section now and
    refused for other tasks, so 0013 drops it from those (a code run keeps its own)."""
    from sqlalchemy import select

    from backend.db.models import Run
    from trainer.spec.config import ConfigError, parse_run_config

    migrate(empty_db_url, "0012")
    code = {"test_timeout_s": 4.0, "timeout_s": 30.0, "memory_mb": 512, "workers": 0}
    code_run = {"method": "grpo", "task": "code", "preset": None, "model_path": "/m", "train_data": "/d.jsonl",
                "code": dict(code)}
    stored = {1: {"method": "aero", "code": dict(code)}, 2: {"method": "grpo", "task": "countdown", "code": dict(code)},
              3: code_run, 4: {"method": "dapo"}}
    with pytest.raises(ConfigError, match="task arithmetic has no code section"):
        parse_run_config(stored[1])
    with get_engine(empty_db_url).begin() as conn:
        insert_queued_runs(conn, stored)
    migrate(empty_db_url)
    with get_engine(empty_db_url).connect() as conn:
        got = dict(conn.execute(select(Run.__table__.c.id, Run.__table__.c.config)).all())
    assert got == {1: {"method": "aero"}, 2: {"method": "grpo", "task": "countdown"}, 3: code_run, 4: stored[4]}
    assert parse_run_config(got[1]).task == "arithmetic" and parse_run_config(got[2]).task == "countdown"
    assert parse_run_config(got[3]).code.memory_mb == 512


def test_migration_0014_dates_a_waiting_run_from_its_start(empty_db_url):
    """``waiting_since`` is new: a run waiting for its GPUs while 0014 runs is taken to wait since
    it started (a run waits before its first step); every other run waits since nothing."""
    from datetime import datetime

    import sqlalchemy as sa
    from sqlalchemy import select, update

    from backend.db.models import Run

    migrate(empty_db_url, "0013")
    started = datetime(2026, 12, 5, 10, 0, 0)
    with get_engine(empty_db_url).begin() as conn:
        insert_queued_runs(conn, {1: {"method": "grpo"}, 2: {"method": "grpo"}, 3: {"method": "grpo"}})
        sa_table = sa.table("runs", sa.column("id"), sa.column("status"), sa.column("started_at", sa.DateTime),
                            sa.column("waiting_for"))
        conn.execute(update(sa_table).where(sa_table.c.id.in_([1, 2])).values(status="running", started_at=started))
        conn.execute(update(sa_table).where(sa_table.c.id == 1).values(waiting_for="1 GPU(s): 0 of the Ray cluster's 1 free"))
    migrate(empty_db_url)
    with get_engine(empty_db_url).connect() as conn:
        runs = dict(conn.execute(select(Run.__table__.c.id, Run.__table__.c.waiting_since)).all())
    assert runs == {1: started, 2: None, 3: None}
    downgrade(empty_db_url, "0013")
    assert "waiting_since" not in {c["name"] for c in inspect(get_engine(empty_db_url)).get_columns("runs")}


def test_migration_0016_writes_the_synchronous_offpolicy_block_into_whole_stored_configs(empty_db_url):
    """A run stored whole before asynchronous training existed trained synchronously: 0016 writes
    the block's defaults into it, so it groups with a new synchronous run of the same config; a
    partial config is left for parsing to fill; downgrade drops the block."""
    from sqlalchemy import select

    from backend.db.models import Run
    from trainer.spec.config import parse_run_config

    migrate(empty_db_url, "0015")
    whole = parse_run_config({"method": "aero"}).model_dump(mode="json")
    whole.pop("offpolicy")
    stored = {1: whole, 2: {"method": "grpo"}}
    with get_engine(empty_db_url).begin() as conn:
        insert_queued_runs(conn, stored)
    migrate(empty_db_url, "0016")
    with get_engine(empty_db_url).connect() as conn:
        got = dict(conn.execute(select(Run.__table__.c.id, Run.__table__.c.config)).all())
    assert got[1] == parse_run_config({"method": "aero"}).model_dump(mode="json")  # as a new run stores it
    assert got[2] == {"method": "grpo"}
    downgrade(empty_db_url, "0015")
    with get_engine(empty_db_url).connect() as conn:
        got = dict(conn.execute(select(Run.__table__.c.id, Run.__table__.c.config)).all())
    assert got == stored


def test_migration_0017_moves_the_generation_fields_into_the_rollout_block(empty_db_url):
    """``sampler``, ``rollout_decode``, ``sampler_rng`` and ``aero.schedule`` are the ``rollout``
    block's now: 0017 moves them in stored runs and sweeps (base and overrides, nested or dotted,
    each in its own form); a run stored whole gets the whole block, so it stores what a new run of
    the same config stores; the new configs parse without a deprecation warning; a downgrade
    writes the old fields back."""
    import warnings

    from sqlalchemy import insert, select

    from backend.db.models import Run, Sweep
    from trainer.spec.config import parse_run_config

    migrate(empty_db_url, "0016")
    whole = parse_run_config({"method": "aero", "rollout": {"rng": "per-row", "schedule": "continuous"}}).model_dump(mode="json")
    old_whole = {k: v for k, v in whole.items() if k != "rollout"}
    old_whole.update(sampler="hf", rollout_decode="dynamic", sampler_rng="per-row")
    old_whole["aero"] = {**whole["aero"], "schedule": "continuous"}
    grpo_whole = parse_run_config({"method": "grpo"}).model_dump(mode="json")
    old_grpo = {k: v for k, v in grpo_whole.items() if k != "rollout"}
    old_grpo.update(sampler="hf", rollout_decode="dynamic", sampler_rng="stream")
    stored = {1: old_whole, 2: old_grpo, 3: {"method": "aero", "rollout_decode": "static", "aero": {"schedule": "calls", "k": 2}},
              4: {"method": "grpo", "seed": 4}}
    spec = {"base": {"sampler_rng": "per-row", "steps": 5}, "methods": ["aero"], "seeds": [0],
            "overrides": [{"aero.schedule": "continuous", "optim.lr": 1e-5}, {"aero": {"schedule": "calls"}}], "tags": []}
    with get_engine(empty_db_url).begin() as conn:
        insert_queued_runs(conn, stored)
        conn.execute(insert(Sweep.__table__).values(id=1, name="s", spec=spec))
    migrate(empty_db_url)

    def read():
        with get_engine(empty_db_url).connect() as conn:
            return (dict(conn.execute(select(Run.__table__.c.id, Run.__table__.c.config)).all()),
                    conn.execute(select(Sweep.__table__.c.spec)).scalar_one())

    got, got_spec = read()
    assert got[1] == whole and got[2] == grpo_whole  # as new runs of the same configs store them
    assert got[3] == {"method": "aero", "rollout": {"decode": "static", "schedule": "calls"}, "aero": {"k": 2}}
    assert got[4] == stored[4]
    assert got_spec == {**spec, "base": {"steps": 5, "rollout": {"rng": "per-row"}},
                        "overrides": [{"optim.lr": 1e-5, "rollout.schedule": "continuous"}, {"rollout": {"schedule": "calls"}}]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new fields: no deprecation warning
        assert parse_run_config(got[3]).rollout.decode == "static"
    downgrade(empty_db_url, "0016")
    back, back_spec = read()
    assert back[3] == stored[3] and back[4] == stored[4] and back_spec == spec
    assert back[1] == old_whole  # the whole block back in its old places
