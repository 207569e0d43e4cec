"""Open a dashboard page in Streamlit's AppTest (no browser), shared by the page tests."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def open_page(page: str, query: dict[str, str] | None = None) -> AppTest:
    """Run the app, switch to ``page`` with ``query`` params, and fail on any exception."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    if page != "overview":
        at.switch_page(f"app_pages/{page}.py")
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at
