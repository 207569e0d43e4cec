"""Schemathesis at a larger budget than tests/backend/api/test_schemathesis.py (issue 11).

Measures, does not assert: builds the app exactly as the test does (in-process ASGI, a fresh
throwaway database of KIND migrated and seeded with 2 runs + metrics, an API token, a recorded
enqueue instead of a broker), then generates up to POSITIVE valid and NEGATIVE schema-violating
cases per operation (the SSE stream excluded, as in the test), stopping each operation after
BUDGET_S / (2 x operations) seconds. Counts cases, status classes and 5xx (not_a_server_error),
and in positive mode also runs response_schema_conformance, status_code_conformance and
content_type_conformance on every response. The database is dropped at the end.

ROLE (default admin) is the role of the token the cases are sent with (admin, member, viewer);
it also counts the writes (POST, PATCH, PUT, DELETE) that answered 2xx, which must be 0 for a
viewer.

    python benchmarks/schemathesis_run.py sqlite|postgresql BUDGET_S POSITIVE NEGATIVE [ROLE]
"""
import collections
import sys
import tempfile
import time
from pathlib import Path
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi import checks as oc
from backend.db.migrate import migrate
from backend.db.session import get_engine, make_sessionmaker
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.stores
from tests.stores import temp_database
from backend.db.tokens import create_token
from backend.db import runs as repo
from backend.db.metrics import upsert_eval_results, upsert_step_metrics
from backend.main import create_app
from backend.settings import Settings
from trainer.spec.config import RunConfig

kind, budget = sys.argv[1], float(sys.argv[2])
role = sys.argv[5] if len(sys.argv) > 5 else "admin"
EX = {GenerationMode.POSITIVE: int(sys.argv[3]), GenerationMode.NEGATIVE: int(sys.argv[4])}
CHECKS = {"response_schema_conformance": oc.response_schema_conformance,
          "status_code_conformance": oc.status_code_conformance,
          "content_type_conformance": oc.content_type_conformance}
tmp = Path(tempfile.mkdtemp(prefix="aero_st_"))
with temp_database(kind, tmp) as url:
    print("db", url.split("@")[-1])
    migrate(url)
    with make_sessionmaker(get_engine(url))() as s:
        for status in ("queued", "succeeded"):
            run = repo.create_run(s, RunConfig(steps=3).model_dump(mode="json"), queue="cpu")
            if status == "succeeded":
                repo.claim_run(s, run.id, "w")
                repo.mark_succeeded(s, run.id)
            upsert_step_metrics(s, run.id, {1: {"a": 1.0}, 2: {"a": 2.0}})
            upsert_eval_results(s, run.id, 2, {"arith": {"k": 1, "avg_at_k": 0.5, "pass_at_k": 0.5}})
        _, tok = create_token(s, "st", role)
        s.commit()
    sent = []
    app = create_app(Settings(database_url=url, data_dir=tmp / "data", migrate_on_start=False),
                     enqueue=lambda rid, q: sent.append((rid, q)))
    auth = {"Authorization": f"Bearer {tok}"}
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    ops = [r.ok() for r in schema.get_all_operations()]
    all_ops = len(ops)
    ops = [op for op in ops if not op.path.endswith("/stream")]
    print("operations in schema", all_ops, "tested", len(ops))
    per_op = budget / (2 * len(ops))
    cases, statuses, fails = collections.Counter(), collections.Counter(), collections.Counter()
    fivexx, fail_ex = [], {}
    writes_ok = collections.Counter()
    t0 = time.time()
    for mode in EX:
        for op in ops:
            start = time.time()
            @given(case=op.as_strategy(generation_mode=mode))
            @settings(max_examples=EX[mode], deadline=None, database=None, suppress_health_check=list(HealthCheck))
            def check(case):
                if time.time() - start > per_op:
                    return
                r = case.call(headers=dict(auth))
                cases[(mode.value, op.label)] += 1
                statuses[r.status_code // 100] += 1
                if op.method.upper() in ("POST", "PATCH", "PUT", "DELETE") and r.status_code < 300:
                    writes_ok[op.label] += 1
                if r.status_code >= 500:
                    fivexx.append((op.label, r.status_code, r.text[:500], case.as_curl_command()))
                if mode is GenerationMode.POSITIVE:
                    for name, fn in CHECKS.items():
                        try:
                            case.validate_response(r, checks=[fn], headers=dict(auth))
                        except Exception as e:  # noqa: BLE001 - every failed check is counted, none stops the run
                            fails[(name, op.label)] += 1
                            fail_ex.setdefault((name, op.label), (r.status_code, str(e)[:400], case.as_curl_command()))
            try:
                check()
            except Unsatisfiable:
                pass
    el = time.time() - t0
    by_mode = {m: sum(v for (mode, _), v in cases.items() if mode == m) for m in ("positive", "negative")}
    print(f"elapsed {el:.0f}s  cases total {sum(cases.values())}  positive {by_mode['positive']}  "
          f"negative {by_mode['negative']}")
    print("status classes", dict(sorted(statuses.items())))
    print("role", role, " writes answered 2xx", sum(writes_ok.values()), dict(writes_ok))
    print("5xx", len(fivexx))
    for f in fivexx[:10]:
        print("  5XX", f)
    print("ops with cases", len({label for _, label in cases}))
    for k, v in sorted(cases.items()):
        print("  ", k, v)
    print("check failures (positive mode):", dict(fails))
    for k, v in fail_ex.items():
        print("  EX", k, v)
