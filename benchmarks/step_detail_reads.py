"""Reads of stored step details (issue 24), worst case under the default caps: 200 steps of 256
rollouts with 2,000-character prompts and responses (~1 MB a step). GET /rollouts (a page of 50,
with and without filters) and GET /histograms (every step) through the real app in process, on
SQLite and PostgreSQL (127.0.0.1:5432, user postgres; a throwaway database). Usage:
.venv/bin/python benchmarks/step_detail_reads.py"""

from __future__ import annotations

import pathlib
import statistics
import tempfile
import time

import psycopg
from fastapi.testclient import TestClient

from backend.db.migrate import migrate
from backend.db.rollouts import upsert_step_details
from backend.db.runs import create_run
from backend.db.session import session_scope
from backend.main import create_app
from backend.settings import Settings
from trainer.spec.config import RunConfig

PG = "postgresql://postgres@127.0.0.1:5432"
DB = "aero_step_detail_bench"


def worst(step: int) -> dict:
    rows = [{"group": i // 16, "row": i, "prompt": "p" * 2000, "response": "r" * 2000, "reward": float(i % 2),
             "correct": bool(i % 2), "advantage": 0.5, "stratum": "low", "round": 0, "stage": "explore", "length": 500,
             "truncated": False, "clipped": True} for i in range(256)]
    return {"rollouts": rows, "histograms": {"pass_rate": {"lo": 0, "hi": 1, "counts": [1] * 10},
                                              "length": {"lo": 0, "hi": 512, "counts": [16] * 16}}}


def store_url(kind: str, tmp: pathlib.Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'a.sqlite'}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB}")
        c.execute(f"CREATE DATABASE {DB}")
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{DB}"


def main() -> None:
    for kind in ("sqlite", "postgresql"):
        tmp = pathlib.Path(tempfile.mkdtemp())
        url = store_url(kind, tmp)
        migrate(url)
        with session_scope(url) as s:
            rid = create_run(s, RunConfig(steps=500).model_dump(mode="json"), queue="cpu").id
        t0 = time.perf_counter()
        for first in range(1, 201, 20):
            with session_scope(url) as s:
                upsert_step_details(s, rid, {st: worst(st) for st in range(first, first + 20)})
        write_ms = 1000 * (time.perf_counter() - t0) / 200
        client = TestClient(create_app(Settings(database_url=url, data_dir=tmp / "d", migrate_on_start=False)))
        for query in ("rollouts?step=150&limit=50", "rollouts?step=150&limit=50&min_reward=0.5&stratum=low", "histograms"):
            client.get(f"/api/runs/{rid}/{query}")
            times = []
            for _ in range(30):
                t = time.perf_counter()
                r = client.get(f"/api/runs/{rid}/{query}")
                times.append(time.perf_counter() - t)
                assert r.status_code == 200
            print(kind, query, f"p50 {1000 * statistics.median(times):.1f} ms, max {1000 * max(times):.1f} ms, {len(r.content)} bytes")
        print(kind, f"write per step (256 rows, 2 x 2,000 chars each, 20 steps a transaction): {write_ms:.1f} ms")


if __name__ == "__main__":
    main()
