"""Per-caller rate limits (backend/api/rate_limit.py): a flooding token gets 429 with
Retry-After, valid and invalid bodies alike, while another token's reads go on; callers without
a token are keyed by address; health probes are never limited; off by default."""

from __future__ import annotations

from fastapi.testclient import TestClient

from backend.api.rate_limit import TokenBuckets, caller_key
from backend.db.tokens import create_token
from backend.main import create_app


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_token_buckets_refill_at_the_rate_up_to_the_burst():
    clock = Clock()
    b = TokenBuckets(rate=2.0, burst=3.0, clock=clock)
    assert [b.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]  # the burst
    assert b.take("a") == 0.5  # dry: one token comes back in 1 / rate s
    assert b.take("b") == 0.0  # another caller has its own bucket
    clock.t = 0.5
    assert b.take("a") == 0.0 and b.take("a") > 0
    clock.t = 100.0
    assert [b.take("a") for _ in range(4)].count(0.0) == 3  # refilled to the burst, not past it


def test_callers_are_keyed_by_token_digest_or_address():
    with_token = {"headers": [(b"authorization", b"Bearer aero_secret")], "client": ("10.0.0.1", 5)}
    assert caller_key(with_token).startswith("t:") and "aero_secret" not in caller_key(with_token)
    assert caller_key({"headers": [], "client": ("127.0.0.9", 5)}) == "a:127.0.0.9"


def test_a_flooding_token_is_refused_and_another_user_is_not(make_settings, session):
    _, alice = create_token(session, "alice", role="member")
    _, bob = create_token(session, "bob", role="member")
    session.commit()
    # 0.2 per second: even a loop slowed to 10 s on a loaded machine earns 2 more requests, not more
    app = create_app(make_settings(rate_limit_per_s=0.2, rate_limit_burst=5), enqueue=lambda *a: None)
    with TestClient(app) as c:
        flood = {"Authorization": f"Bearer {alice}"}
        codes = [c.post("/api/runs", json={"config": {"steps": "many"}}, headers=flood).status_code for _ in range(5)]
        codes += [c.get("/api/runs", headers=flood).status_code for _ in range(20)]
        assert codes[:5] == [422] * 5  # the burst: invalid bodies are answered as usual
        refused = c.get("/api/runs", headers=flood)
        assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 5
        assert "retry in" in refused.json()["detail"]
        assert codes.count(429) >= 17  # past the burst a loop gets almost nothing more
        assert c.get("/api/runs", headers={"Authorization": f"Bearer {bob}"}).status_code == 200
        assert all(c.get("/api/health").status_code == 200 for _ in range(20))  # probes are exempt


def test_off_by_default(make_settings):
    app = create_app(make_settings(), enqueue=lambda *a: None)
    with TestClient(app) as c:
        assert all(c.get("/api/runs").status_code == 200 for _ in range(50))
