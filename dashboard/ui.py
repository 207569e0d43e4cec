"""Streamlit glue shared by the pages: the API client from settings, cached reads, error
messages in words, links between pages and the method colour legend.

Caching: reads of finished runs never change, so they are cached by a *version* key
(status, current step) taken from the runs list; live data is cached for a second or two.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st

from common.fmt import pct
from dashboard import forms
from dashboard.client import FINISHED, AeroClient, ApiError, api_url_from_env, asks_for_token, token_from_env  # noqa: F401
from dashboard.method_style import NO_METHODS, MethodStyle

PAGES = {  # page file (relative to app.py) -> url path; app.py builds st.navigation from these
    "overview": "app_pages/overview.py", "launch": "app_pages/launch.py", "runs": "app_pages/runs.py",
    "run": "app_pages/run_detail.py", "compare": "app_pages/compare.py", "sweeps": "app_pages/sweeps.py",
}
PLOTLY_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


# ---------------------------------------------------------------- user text in HTML and Markdown

# Run and sweep names, tags, notes and error texts come from users (or echo them): escape them
# wherever Streamlit renders HTML (st.html) or Markdown (captions, alerts, page-link labels).
# Markdown: brackets carry links, images and Streamlit's directives (:red[...]), backticks code,
# "$" LaTeX; Streamlit renders no raw HTML in Markdown. Emphasis characters are left as they are
# (cosmetic at worst), so messages such as "must be <= n_total" read the same in the page source.
_MD_SPECIAL = re.compile(r"([\\`\[\]$])")


def esc(text: Any) -> str:
    """``text`` for st.html: HTML-escaped (quotes too, so it is safe in an attribute)."""
    return html.escape("" if text is None else str(text), quote=True)


def md(text: Any) -> str:
    """``text`` for a Markdown string: link, image, directive, code and LaTeX characters
    backslash-escaped, newlines as spaces (no headings or lists from a user's text)."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(("" if text is None else str(text)).splitlines()))


# ---------------------------------------------------------------- settings and client


def api_url() -> str:
    if "api_url" not in st.session_state:
        st.session_state["api_url"] = api_url_from_env()
    return st.session_state["api_url"]


def api_token() -> str | None:
    if "api_token" not in st.session_state:
        st.session_state["api_token"] = token_from_env() or ""
    return st.session_state["api_token"] or None


@st.cache_resource(max_entries=8)
def _client(url: str, token: str | None) -> AeroClient:
    return AeroClient(url, token)


def client() -> AeroClient:
    """The client for the current settings (one per URL/token, kept across reruns)."""
    return _client(api_url(), api_token())


# ---------------------------------------------------------------- cached reads (args are the cache key)


@st.cache_data(ttl=300, show_spinner=False)
def openapi(url: str) -> dict:
    return _client(url, None).openapi()


@st.cache_data(ttl=300, show_spinner=False)
def methods(url: str, token: str | None) -> list[dict]:
    return client().methods()


def method_specs() -> list[dict]:
    """GET /api/methods (cached); when the API cannot be reached, the specs this session last
    read (none before the first read: every method grey under its own name)."""
    try:
        specs = methods(api_url(), api_token())
    except ApiError:
        return st.session_state.get("method_specs", [])
    st.session_state["method_specs"] = specs
    return specs


def method_style() -> MethodStyle:
    """Method labels, colours and dashes for this page run, from the API's method specs: the
    pages pass it to the figure and table builders that draw methods."""
    specs = method_specs()
    return MethodStyle.from_specs(specs) if specs else NO_METHODS


def method_menu() -> forms.MethodMenu:
    """The Launch form's methods for this page run, from the API's method specs (the ones this
    session last read when the API cannot be reached; none before the first read): the Launch
    page passes it to the form's builders."""
    specs = method_specs()
    return forms.MethodMenu.from_specs(specs) if specs else forms.NO_MENU


@st.cache_data(ttl=5, show_spinner=False)
def health(url: str) -> dict:
    return _client(url, None).health()


@st.cache_data(ttl=2, show_spinner=False)
def runs_page(url: str, token: str | None, status: tuple[str, ...] = (), method: tuple[str, ...] = (), tag: str = "",
              sweep_id: int | None = None, limit: int = 200, owner: str | None = None) -> dict:
    return _client(url, token).list_runs(status=status, method=method, tag=tag or None, sweep_id=sweep_id, owner=owner,
                                         limit=limit)


@st.cache_data(ttl=30, show_spinner=False)
def _me(url: str, token: str | None) -> dict | None:
    if not token:
        return None
    try:
        return _client(url, token).me()
    except ApiError:
        return None  # no valid token (or an API without users): every write stays hidden


def me() -> dict | None:
    """Who the dashboard's token belongs to (GET /api/me, cached 30 s): ``user``, ``role``,
    ``may_submit``, ``may_change_others``; None without a valid token."""
    return _me(api_url(), api_token())


def may_submit() -> bool:
    """Whether the token may submit runs (an admin or member token)."""
    who = me()
    return bool(who and who.get("may_submit"))


def may_change(run: dict) -> bool:
    """Whether the token may cancel, edit or delete ``run``: an admin any run, a member their own."""
    who = me()
    if not who or not who.get("may_submit"):
        return False
    return bool(who.get("may_change_others")) or (run.get("owner") is not None and run.get("owner") == who.get("user"))


def access_note() -> str:
    """One sentence on what the token may do (shown where actions are hidden)."""
    who = me()
    if who is None:
        return "Actions need a valid API token (set one under Settings)."
    if not who.get("may_submit"):
        return f"Your token ({md(who['user'])}, {who['role']}) may only read."
    if not who.get("may_change_others"):
        return f"As a member ({md(who['user'])}), you may change only your own runs."
    return ""


@st.cache_data(ttl=3600, max_entries=2000, show_spinner=False)
def metrics(url: str, token: str | None, run_id: int, keys: tuple[str, ...] | None, max_points: int, version: tuple) -> dict:
    """Downsampled metrics; ``version`` = (status, current_step) invalidates live runs."""
    return _client(url, token).metrics(run_id, list(keys) if keys else None, max_points=max_points)


@st.cache_data(ttl=3600, max_entries=500, show_spinner=False)
def metric_keys(url: str, token: str | None, run_id: int, version: tuple) -> list[str]:
    return _client(url, token).metric_keys(run_id)


@st.cache_data(ttl=3600, max_entries=500, show_spinner=False)
def rollouts(url: str, token: str | None, run_id: int, step: int | None, filters: tuple, offset: int, limit: int,
             version: tuple) -> dict:
    """A page of stored rollouts; ``filters`` = (stratum, stage, min_reward, max_reward)."""
    stratum, stage, lo, hi = filters
    return _client(url, token).rollouts(run_id, step, stratum=stratum, stage=stage, min_reward=lo, max_reward=hi,
                                        offset=offset, limit=limit)


@st.cache_data(ttl=3600, max_entries=500, show_spinner=False)
def histograms(url: str, token: str | None, run_id: int, version: tuple) -> dict:
    return _client(url, token).histograms(run_id)


@st.cache_data(ttl=3600, max_entries=500, show_spinner=False)
def evals(url: str, token: str | None, run_id: int, version: tuple) -> list[dict]:
    return _client(url, token).evals(run_id)


@st.cache_data(ttl=3600, max_entries=200, show_spinner=False)
def compare(url: str, token: str | None, run_ids: tuple[int, ...], baseline: int | None, version: tuple) -> dict:
    return _client(url, token).compare(list(run_ids), baseline)


@st.cache_data(ttl=3600, max_entries=200, show_spinner=False)
def compare_groups(url: str, token: str | None, run_ids: tuple[int, ...], baseline: int | None, version: tuple) -> dict:
    """Seed groups of ``run_ids`` (``version``: the runs' versions, so live runs refresh)."""
    return _client(url, token).compare_groups(list(run_ids), baseline=baseline)


@st.cache_data(ttl=3600, max_entries=200, show_spinner=False)
def compare_curves(url: str, token: str | None, run_ids: tuple[int, ...], keys: tuple[str, ...], x: str, points: int,
                   version: tuple, smooth: int = 1, groups: tuple[tuple[int, ...], ...] = ()) -> dict:
    """Mean curves with seed bands per group of ``run_ids`` (or of the explicit ``groups``)."""
    return _client(url, token).compare_curves(list(run_ids), groups=[list(g) for g in groups], keys=list(keys), x=x,
                                              points=points, smooth=smooth)


MAX_EXPLICIT_GROUPS = 20  # the API's limit of `groups` per /compare/curves call


def run_curves(url: str, token: str | None, run_ids: tuple[int, ...], keys: tuple[str, ...], x: str, points: int,
               version: tuple, smooth: int = 1) -> dict[int, dict]:
    """{run id: its curves} with every run on its own (each an explicit group of one, so no
    seeds are averaged), in as many /compare/curves calls as the API's group limit needs."""
    out: dict[int, dict] = {}
    for i in range(0, len(run_ids), MAX_EXPLICIT_GROUPS):
        chunk = tuple((rid,) for rid in run_ids[i:i + MAX_EXPLICIT_GROUPS])
        body = compare_curves(url, token, (), keys, x, points, version, smooth, chunk)
        out.update({g["run_ids"][0]: g.get("curves") or {} for g in body["groups"]})
    return out


@st.cache_data(ttl=3, show_spinner=False)
def sweeps_page(url: str, token: str | None, limit: int = 20) -> dict:
    return _client(url, token).list_sweeps(limit=limit)


@st.cache_data(ttl=3, show_spinner=False)
def sweep(url: str, token: str | None, sweep_id: int) -> dict:
    return _client(url, token).get_sweep(sweep_id)


def version(run: dict) -> tuple:
    """Cache key part for a run's data: finished runs never change."""
    return (run["status"], run["current_step"], run.get("finished_at"))


def is_live(run: dict) -> bool:
    return run["status"] not in FINISHED


def clear_caches() -> None:
    runs_page.clear()
    health.clear()
    sweep.clear()


# ---------------------------------------------------------------- errors in words


def show_error(err: ApiError, what: str = "") -> None:
    """One readable message per failure kind; never a traceback."""
    prefix = f"Could not {md(what)}: " if what else ""
    if err.kind == "down":
        st.error(f"**The API is not reachable.** {md(err.message)}", icon=":material/cloud_off:")
        st.caption("The dashboard shows nothing but what the API serves. Once the API is up, this page fills in "
                   "by itself on the next refresh.")
    elif err.kind == "auth":
        st.error(f"{prefix}{md(err.message)}", icon=":material/key_off:")
    elif err.kind == "not_found":
        st.warning(f"{prefix}{md(err.message)} It may have been deleted.", icon=":material/search_off:")
    elif err.kind == "server" and err.status == 503:
        st.error(f"{prefix}{md(err.message)} — the queue (broker) or the store is unavailable; try again shortly.")
    else:
        st.error(f"{prefix}{md(err.message)}")


def guarded(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Run a page (or fragment) body; an API failure or a bug becomes a message, not a traceback."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except ApiError as e:
            show_error(e)
        except Exception as e:  # noqa: BLE001 - the user sees a sentence; details stay collapsed
            st.error(f"Something went wrong while drawing this page: {type(e).__name__}: {md(e)}")

    return wrapper


# ---------------------------------------------------------------- small widgets


def method_chip(method: str, style: MethodStyle) -> str:
    """Inline HTML: a coloured dot and the method's name."""
    color = style.color(method)  # a "#RRGGBB" of the specs or grey: never user text in the style
    return (f"<span style='display:inline-flex;align-items:center;gap:4px;margin-right:10px'>"
            f"<span style='width:10px;height:10px;border-radius:50%;background:{color};display:inline-block'></span>"
            f"{esc(style.label(method))}</span>")


def progress_bar(fraction: float | None, method: str, style: MethodStyle, text: str = "") -> str:
    """Inline HTML: a run's progress bar in its method's colour, with ``text`` (else the
    percentage) under it. st.progress always paints in the theme's red, which on a page of
    method-coloured charts reads as "this is AERO" or "this failed"."""
    f = min(1.0, max(0.0, float(fraction or 0.0)))
    return (f"<div style='font-size:0.85rem' title='{pct(f)}'>"
            f"<div style='background:#E6E9EF;border-radius:4px;height:8px;margin:6px 0 4px'>"
            f"<div style='width:{100 * f:.1f}%;background:{style.color(method)};height:8px;border-radius:4px'></div></div>"
            f"{esc(text) if text else pct(f)}</div>")


def method_legend(style: MethodStyle, methods: Sequence[str] | None = None) -> None:
    """Every known method's chip (or those of ``methods``)."""
    shown = style.names if methods is None else methods
    st.html("<div style='font-size:0.85rem'>" + "".join(method_chip(m, style) for m in shown) + "</div>")


def run_link(run_id: int, label: str | None = None, **kw) -> None:
    st.page_link(PAGES["run"], label=md(label or f"Open run #{run_id}"), query_params={"run": str(run_id)},
                 icon=":material/monitoring:", **kw)


def plot(fig, key: str | None = None) -> None:
    st.plotly_chart(fig, key=key, config=PLOTLY_CONFIG)
