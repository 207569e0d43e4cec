"""Property-based run over the OpenAPI schema (schemathesis): no generated request — valid
ones (positive mode) or schema-violating ones (negative mode) — makes the server answer 5xx,
on SQLite and PostgreSQL, with a token of each role (admin, member, viewer); with a viewer's
token no write succeeds (no 2xx to any POST, PATCH or DELETE, and no audit record of theirs),
and a member's never creates or revokes a token. Bounded (few examples per operation) to stay fast. The SSE stream
is excluded: it waits for the run to finish by design (tested in test_sse.py).

(Each operation runs under Hypothesis' ``@given`` inside one test; schemathesis' own pytest
plugin fixtures do not work with this pytest version.)"""

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from sqlalchemy import func, select

from backend.db import runs as repo
from backend.db.models import AuditEvent
from backend.db.tokens import create_token
from backend.db.metrics import upsert_eval_results, upsert_step_metrics
from trainer.spec.config import RunConfig

NO_PARAMETERS = {"GET /api/health", "GET /api/metrics", "GET /metrics", "GET /api/me", "GET /api/tokens", "GET /api/users"}
WRITES = {"POST", "PATCH", "PUT", "DELETE"}
EXAMPLES = {GenerationMode.POSITIVE: 10, GenerationMode.NEGATIVE: 6}


@pytest.fixture
def seeded_app(app, session):
    for status in ("queued", "succeeded"):  # ids 1 and 2 exist, so generated small ids sometimes hit
        run = repo.create_run(session, RunConfig(steps=3).model_dump(mode="json"), queue="cpu")
        if status == "succeeded":
            repo.claim_run(session, run.id, "w")
            repo.mark_succeeded(session, run.id)
        upsert_step_metrics(session, run.id, {1: {"a": 1.0}, 2: {"a": 2.0}})
        upsert_eval_results(session, run.id, 2, {"arith": {"k": 1, "avg_at_k": 0.5, "pass_at_k": 0.5}})
    session.commit()
    return app


ROLES = ("viewer", "member", "admin")  # the order each case is sent in: the viewer sees the state before anyone wrote


@pytest.mark.parametrize("mode", list(EXAMPLES), ids=lambda m: m.value)
def test_no_server_errors(seeded_app, session, mode):
    """Each generated case is sent once with each role's token. The cases are the same for every
    role (``derandomize``), so generating them once and sending each three times checks what three
    runs would, at a third of the generation (Hypothesis' drawing is most of this test's time)."""
    auth = {}
    for role in ROLES:
        _, tok = create_token(session, f"st-{role}", role)
        auth[role] = {"Authorization": f"Bearer {tok}"}
    session.commit()
    schema = schemathesis.openapi.from_asgi("/openapi.json", seeded_app)
    ops = [r.ok() for r in schema.get_all_operations()]
    ops = [op for op in ops if not op.path.endswith("/stream")]
    assert len(ops) >= 12
    seen: dict[str, list[tuple[str, int]]] = {role: [] for role in ROLES}
    for op in ops:
        @given(case=op.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES[mode], deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case):
            for role in ROLES:
                response = case.call(headers=dict(auth[role]))
                seen[role].append((op.label, response.status_code))
                assert response.status_code < 500, (f"{op.label} as {role}: {response.status_code} {response.text[:500]}\n"
                                                     f"{case.as_curl_command()}")
                wrote = op.method.upper() in WRITES and response.status_code < 300
                assert not (wrote and role == "viewer"), f"a viewer's write succeeded: {op.label} {response.status_code}"
                assert not (wrote and role == "member" and "/tokens" in op.path), f"a member changed tokens: {op.label}"

        try:
            check()
        except Unsatisfiable:  # negative mode: an operation without parameters has nothing to break
            assert mode is GenerationMode.NEGATIVE and op.label in NO_PARAMETERS, op.label
    for role in ROLES:
        labels = {label for label, _ in seen[role]}
        assert labels | NO_PARAMETERS >= {op.label for op in ops}, role
        assert labels >= {op.label for op in ops} - NO_PARAMETERS, role
    # the viewer's writes reached the role check (403), and none left a record
    assert {label for label, code in seen["viewer"] if code == 403} >= {"POST /api/runs", "POST /api/sweeps", "POST /api/tokens"}
    session.expire_all()
    assert session.scalar(select(func.count(AuditEvent.id)).where(AuditEvent.user == "st-viewer")) == 0
