"""AERO Lab dashboard: the router. ``streamlit run dashboard/app.py`` (``aero up`` does this).

Settings: AERO_API_URL (default http://127.0.0.1:8000) and AERO_API_TOKEN (else
<AERO_DATA_DIR>/admin.token); the token can also be pasted in the sidebar. Pages live in
app_pages/; shared helpers in dashboard/ui.py. Only HTTP to the API, never the store.
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

try:
    from dashboard import ui
except ModuleNotFoundError:  # run from a checkout that was not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from dashboard import ui

st.set_page_config(page_title="AERO Lab", page_icon=":material/rocket_launch:", layout="wide")


def _home() -> None:
    """The root URL: open the Overview at its own address."""
    st.switch_page(overview)


# Streamlit serves its default page at "/" only, whatever its url_path, so /overview (the
# address in the docs, the one a user types) answered "Page not found". The Overview is an
# ordinary page at /overview, and a hidden default page at "/" switches to it: both work, and
# the sidebar marks Overview as the current page on either.
overview = st.Page(ui.PAGES["overview"], title="Overview", icon=":material/home:", url_path="overview")
home = st.Page(_home, title="AERO Lab", url_path="home", default=True, visibility="hidden")
pages = {
    "": [home, overview],
    "Train": [
        st.Page(ui.PAGES["launch"], title="Launch", icon=":material/rocket_launch:", url_path="launch"),
        st.Page(ui.PAGES["runs"], title="Runs", icon=":material/list:", url_path="runs"),
        st.Page(ui.PAGES["run"], title="Run detail", icon=":material/monitoring:", url_path="run"),
    ],
    "Analyse": [
        st.Page(ui.PAGES["compare"], title="Compare", icon=":material/compare_arrows:", url_path="compare"),
        st.Page(ui.PAGES["sweeps"], title="Sweeps", icon=":material/grid_view:", url_path="sweeps"),
    ],
}
page = st.navigation(pages)
if page is home:
    page.run()  # "/": switch to /overview now, before drawing a sidebar the switch would throw away


def sidebar() -> None:
    with st.sidebar:
        try:
            h = ui.health(ui.api_url())
            st.caption(f":green[●] API connected · {h['database']} store")
        except ui.ApiError:
            st.caption(f":red[●] API not reachable at {ui.api_url()}")
        st.caption("Method colours (the same on every chart)")
        ui.method_legend(ui.method_style())
        ask = ui.asks_for_token() and not ui.api_token()
        with st.expander("Settings", icon=":material/settings:", expanded=ask):
            if ask:
                st.caption("This dashboard holds no API token: enter yours to see and launch runs "
                           "(`aero token create NAME` makes one).")
            url = st.text_input("API URL", value=ui.api_url(), help="Set by `aero up` via AERO_API_URL.")
            token = st.text_input("API token", value=ui.api_token() or "", type="password",
                                  help="Needed to launch, cancel and delete runs. `aero up` on localhost passes its admin token "
                                       "(AERO_API_TOKEN or <data dir>/admin.token); a dashboard bound to another "
                                       "address asks for yours. `aero token create NAME` makes one.")
            if url.rstrip("/") != ui.api_url() or token != (ui.api_token() or ""):
                st.session_state["api_url"], st.session_state["api_token"] = url.rstrip("/"), token
                ui.clear_caches()
            st.caption(f"API docs: {ui.api_url()}/docs")


sidebar()
page.run()
