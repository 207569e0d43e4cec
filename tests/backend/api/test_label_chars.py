"""Names and tags a user gives are printed raw by terminals and shown in the dashboard: the API
refuses control characters (C0, DEL, C1) and bidi overrides in them with a 422 naming the field."""

from __future__ import annotations

import pytest

from trainer.spec.safetext import first_forbidden

BAD = ["\x1b[31mred", "x\x9b2J", "a\u202eb", "tab\there", "nl\nx", "del\x7f", "iso\u2066x"]


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("path,body,loc", [
    ("/api/runs", lambda b: {"config": {"name": b}}, ["body", "config", "name"]),
    ("/api/runs", lambda b: {"name": b}, ["body", "name"]),
    ("/api/runs", lambda b: {"tags": ["ok", b]}, ["body", "tags", 1]),
    ("/api/sweeps", lambda b: {"name": b, "methods": ["grpo"]}, ["body", "name"]),
    ("/api/sweeps", lambda b: {"methods": ["grpo"], "tags": [b]}, ["body", "tags", 0]),
    ("/api/sweeps", lambda b: {"methods": ["grpo"], "base": {"name": b}}, ["body", "base", "name"]),
])
def test_control_chars_are_422_naming_the_field(client, auth, enqueued, bad, path, body, loc):
    r = client.post(path, json=body(bad), headers=auth)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(d["loc"] == loc for d in detail), detail
    assert "control" in detail[0]["msg"]
    assert enqueued.sent == []


def test_markup_like_but_printable_names_are_accepted(client, auth):
    for name in ("[/oops]", "[bold]x", "<script>alert(1)</script>", "Ünïcödé ✓"):
        r = client.post("/api/runs", json={"config": {"name": name}, "tags": [name[:64]]}, headers=auth)
        assert r.status_code == 201 or r.status_code == 200, r.text
        assert r.json()["name"] == name


def test_first_forbidden():
    assert first_forbidden("plain [x] <b>") is None
    assert first_forbidden("a\x85b") == "\x85"
    assert first_forbidden("a\u202db") == "\u202d"
