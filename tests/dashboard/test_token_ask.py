"""A dashboard bound to a non-loopback address (AERO_DASHBOARD_ASK_TOKEN=1, what `aero up --host
0.0.0.0` and docker compose set) holds no token: the Settings expander asks for one, and the
token a user enters there is the one the dashboard uses."""

from __future__ import annotations

from pathlib import Path

import httpx
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def test_dashboard_asks_for_a_token_and_uses_the_one_entered(fresh_api, use_api, monkeypatch, tmp_path):
    use_api(fresh_api)  # AERO_API_TOKEN holds a valid token: the dashboard must ignore it
    (tmp_path / "admin.token").write_text(fresh_api.token + "\n")
    monkeypatch.setenv("AERO_DATA_DIR", str(tmp_path))  # nor read the admin token file
    monkeypatch.setenv("AERO_DASHBOARD_ASK_TOKEN", "1")
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/launch.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "No API token is set" in "\n".join(w.value for w in at.warning)
    assert any("holds no API token" in c.value for c in at.sidebar.caption)
    box = next(t for t in at.sidebar.text_input if t.label == "API token")
    assert box.value == ""
    box.set_value(fresh_api.token).run()
    assert not [w for w in at.warning if "No API token" in w.value]
    at.number_input(key="f_steps").set_value(3)
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "is queued" in "\n".join(s.value for s in at.success)
    [(run_id, _)] = fresh_api.enqueued
    assert httpx.get(f"{fresh_api.url}/api/runs/{run_id}").json()["config"]["steps"] == 3
