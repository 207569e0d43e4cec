"""The dashboard under users and roles (a live API, AppTest): runs show their owner, "My runs"
filters to the token's user, and the actions a token may not take are not offered: a viewer
gets no Cancel / Delete / Launch, a member none for other users' runs."""

from __future__ import annotations

import httpx
import pytest

from backend.db.session import session_scope
from backend.db.tokens import create_token
from tests.dashboard.apptest import open_page

CFG = {"method": "grpo", "steps": 2, "batch_prompts": 2, "n_total": 4}


@pytest.fixture
def lab(fresh_api):
    """fresh_api with tokens for alice and bob (members) and vera (viewer), and one queued run
    each of alice and bob (submitted through the API, so they own them)."""
    toks = {}
    with session_scope(fresh_api.db_url) as s:
        for name, role in (("alice", "member"), ("bob", "member"), ("vera", "viewer")):
            toks[name] = create_token(s, name, role)[1]
    runs = {}
    for name in ("alice", "bob"):
        r = httpx.post(f"{fresh_api.url}/api/runs", json={"config": CFG, "name": f"{name}-run"},
                       headers={"Authorization": f"Bearer {toks[name]}"})
        assert r.status_code == 201, r.text
        runs[name] = r.json()["id"]
    return fresh_api, toks, runs


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


def keys(at, kind: str) -> set[str]:
    return {w.key for w in getattr(at, kind) if w.key}


def test_viewer_sees_owners_but_no_actions(lab, use_api):
    api, toks, runs = lab
    use_api(api, token=toks["vera"])
    at = open_page("runs")
    df = at.dataframe[0].value.set_index("id")
    assert df.loc[runs["alice"], "owner"] == "alice" and df.loc[runs["bob"], "owner"] == "bob"
    assert not {"runs_cancel", "runs_delete"} & keys(at, "button")
    assert "may only read" in texts(at.caption)
    launch = open_page("launch")
    (go,) = [b for b in launch.button if "Launch" in str(b.label)]
    assert go.disabled and "may only read" in texts(launch.caption)
    detail = open_page("run_detail", {"run": str(runs["alice"])})
    assert "detail_cancel" not in keys(detail, "button") and "alice" in texts(detail.caption)


def test_member_filters_my_runs_and_changes_only_their_own(lab, use_api):
    api, toks, runs = lab
    use_api(api, token=toks["alice"])
    at = open_page("runs")
    assert set(at.dataframe[0].value["id"]) == {runs["alice"], runs["bob"]}
    at.toggle(key="runs_mine").set_value(True).run()
    assert list(at.dataframe[0].value["id"]) == [runs["alice"]]
    at.toggle(key="runs_mine").set_value(False).run()
    at.multiselect(key="runs_chosen").set_value([runs["bob"]]).run()
    assert at.button(key="runs_cancel").disabled  # bob's run: not hers to cancel
    assert "only your own" in texts(at.caption)
    at.multiselect(key="runs_chosen").set_value([runs["alice"], runs["bob"]]).run()
    at.button(key="runs_cancel").click().run()
    assert not at.exception
    status = {k: httpx.get(f"{api.url}/api/runs/{v}").json()["status"] for k, v in runs.items()}
    assert status == {"alice": "cancelled", "bob": "queued"}
    detail = open_page("run_detail", {"run": str(runs["bob"])})
    assert "detail_cancel" not in keys(detail, "button")
