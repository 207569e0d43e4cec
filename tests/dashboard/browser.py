"""Browser tests act only on a Streamlit app at rest: the one shared helper the dashboard's
Playwright tests (tests/dashboard/test_browser*.py) use for every click, fill, key press,
scroll, screenshot and rerun-dependent read.

Why: every widget change reruns the page script, and a rerun replaces elements. A locator
resolved just before a rerun can point at a node React removes before the action lands
("Element is not attached to the DOM", seen in CI on the Rollouts view), and a read taken while
a rerun is still on its way sees the page before it.

How the app's state is known (no sleeps): :data:`TRACKER_JS` runs in every page before
Streamlit's own scripts (``install``; the ``page`` fixture of conftest.py calls it). It
watches the app's websocket: the BackMsgs the browser sends (a ``rerun_script`` is a request
for a run: a widget change, a page link, a fragment's timer) and the ForwardMsgs the server
sends back (``new_session`` starts a run, ``script_finished`` ends it), and notes when the DOM
last gained or lost nodes or anything scrolled. :func:`settle` waits until the app is idle and
has stayed idle for a short window:

* no rerun requested since the last run started (a request the server has not answered yet),
  and every started run finished;
* the app root says so too: connected, ``data-test-script-state="notRunning"``;
* no stale element (``[data-stale="true"]``, drawn from a run before the current one), no
  "Running..." status widget, no skeleton of an element still loading;
* and no node added or removed, nothing scrolled, for ``SETTLE_MS`` (charts drawing after the
  run; a scroll that would close an open list).

:func:`act` settles, then performs the action through a Locator: Playwright resolves a Locator
anew at each action, so the node acted on is the one on the settled page. If a timer's rerun
still detaches it between resolution and action, the action did not happen, so it settles
again and acts again (only on that error, a few times). ``rerun=True`` says the action changes
a widget: it then waits for the browser to have sent that rerun request and for the run to
finish, so the next line sees its result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Locator, Page

SETTLE_MS = 300  # idle this long (no run, no pending request, no DOM node added or removed) before acting
DETACHED = ("not attached to the DOM", "Element is detached", "detached from the DOM")
TRIES = 4  # acting on a node a timer's rerun replaced mid-action: settle and act again, at most this often

# Streamlit's websocket carries protobuf: a BackMsg's rerun_script is field 11; a ForwardMsg's
# new_session is field 4 and script_finished field 6 (streamlit/proto/{Back,Forward}Msg.proto).
TRACKER_JS = r"""
(() => {
  if (window.__aero) return;
  const t = window.__aero = {rerunSent: 0, requests: 0, started: 0, finished: 0, runs: 0, domChanged: 0, idleSince: null};
  const now = () => performance.now();
  const fields = (buf) => {  // the top-level field numbers of one protobuf message
    const b = buf instanceof ArrayBuffer ? new Uint8Array(buf)
      : ArrayBuffer.isView(buf) ? new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength) : null;
    const out = new Set();
    if (!b) return out;
    let i = 0;
    const varint = () => { let v = 0, m = 1, x; do { x = b[i++]; v += (x & 127) * m; m *= 128; } while (x & 128 && i < b.length); return v; };
    while (i < b.length) {
      const tag = varint(), wire = tag % 8;
      out.add(Math.floor(tag / 8));
      if (wire === 0) varint(); else if (wire === 1) i += 8; else if (wire === 2) { const n = varint(); i += n; } else if (wire === 5) i += 4; else break;
    }
    return out;
  };
  const Native = window.WebSocket;
  const send = Native.prototype.send;
  Native.prototype.send = function (data) {
    try { if (fields(data).has(11)) { t.rerunSent = now(); t.requests += 1; } } catch (e) {}
    return send.call(this, data);
  };
  function Tracked(...args) {
    const ws = new Native(...args);
    ws.addEventListener('message', (ev) => {  // added before Streamlit's own listener: it sees each message first
      try {
        const f = fields(ev.data);
        if (f.has(4)) { t.started = now(); t.runs += 1; }
        if (f.has(6)) t.finished = now();
      } catch (e) {}
    });
    return ws;
  }
  Tracked.prototype = Native.prototype;
  for (const k of ['CONNECTING', 'OPEN', 'CLOSING', 'CLOSED']) Tracked[k] = Native[k];
  window.WebSocket = Tracked;
  new MutationObserver((records) => {
    if (records.some((r) => r.addedNodes.length || r.removedNodes.length)) t.domChanged = now();
  }).observe(document, {childList: true, subtree: true});
  document.addEventListener('scroll', () => { t.domChanged = now(); }, true);  // any element's scroll (popovers close on it)
})();
"""

# True once the app has been idle (see the module's docstring) for `settleMs`; false while busy.
IDLE_JS = """(settleMs) => {
  const t = window.__aero;
  const app = document.querySelector('[data-testid="stApp"]');
  const now = performance.now();
  const busy = !t || !app
    || app.getAttribute('data-test-connection-state') !== 'CONNECTED'
    || app.getAttribute('data-test-script-state') !== 'notRunning'
    || t.rerunSent > t.started || t.started > t.finished
    || document.querySelector('[data-stale="true"], .stale-element, [data-testid="stStatusWidgetRunningIcon"], '
                              + '[data-testid="stSkeleton"], [data-testid="stAppSkeleton"]') !== null;
  if (busy) { if (t) t.idleSince = null; return false; }
  if (t.idleSince === null) t.idleSince = now;
  return now - Math.max(t.idleSince, t.finished, t.domChanged) >= settleMs;
}"""


def install(pg: Page) -> None:
    """Track runs and DOM changes in every document ``pg`` loads from now on."""
    pg.add_init_script(TRACKER_JS)


def settle(pg: Page, timeout_ms: float | None = None) -> None:
    """Wait until the app in ``pg`` is idle: no run in flight or requested, nothing stale, and
    the DOM unchanged for :data:`SETTLE_MS` (the page's default timeout unless ``timeout_ms``)."""
    kw = {} if timeout_ms is None else {"timeout": timeout_ms}
    pg.wait_for_function(IDLE_JS, arg=SETTLE_MS, polling=50, **kw)


def requests(pg: Page) -> int:
    """How many reruns the current document has asked the server for."""
    return pg.evaluate("() => window.__aero ? window.__aero.requests : 0")


def act(locator: Locator, action: str, *args: Any, rerun: bool = False, **kwargs: Any) -> Any:
    """``locator.<action>(*args, **kwargs)`` on the settled app (see the module's docstring);
    ``rerun=True``: the action changes a widget, so wait for its rerun to be requested and to
    finish before returning. Returns what the action returned."""
    pg = locator.page
    for attempt in range(TRIES):
        settle(pg)
        before = requests(pg)
        try:
            result = getattr(locator, action)(*args, **kwargs)
            break
        except PlaywrightError as e:
            if attempt == TRIES - 1 or not any(d in str(e) for d in DETACHED):
                raise
    if rerun:
        pg.wait_for_function("(n) => window.__aero && window.__aero.requests > n", arg=before, polling=50, timeout=10_000)
    settle(pg)
    return result


def read(locator: Locator) -> str:
    """The text of ``locator`` once the app has settled (the run that draws it has finished)."""
    return act(locator, "inner_text")


def choose(select: Locator, option: str) -> None:
    """Open the selectbox ``select`` and pick its option containing ``option`` (a rerun).
    Streamlit's selectbox is a combo box: a click on its text field only focuses it, so open the
    list with its own "Open" button; and its list closes when the page scrolls, so scroll the
    box into view first and let that scroll settle (a click that scrolls to its target opened the
    list and the scroll then closed it)."""
    act(select, "scroll_into_view_if_needed")
    act(select.get_by_role("button", name="Open").first, "click")
    act(select.page.get_by_role("option").filter(has_text=option).first, "click", rerun=True)


def count(locator: Locator) -> int:
    """How many elements match ``locator`` on the settled app."""
    settle(locator.page)
    return locator.count()


def no_exception(pg: Page) -> None:
    """The settled page shows no Streamlit exception box."""
    exc = pg.locator('[data-testid="stException"]')
    assert count(exc) == 0, exc.first.inner_text()


def screenshot_when(locator: Locator, ready: Callable[[bytes], bool], timeout_s: float = 60.0) -> bytes:
    """A screenshot of ``locator`` once ``ready(png)`` holds (Plotly and the data grid paint on
    a canvas after the DOM settles, so the pixels are checked, re-shot as the page repaints);
    at the deadline, the last one (the caller's assertion says what is missing)."""
    pg = locator.page
    deadline = pg.evaluate("() => performance.now()") + timeout_s * 1000
    while True:
        png = act(locator, "screenshot")
        if ready(png) or pg.evaluate("() => performance.now()") >= deadline:
            return png
        pg.wait_for_timeout(250)  # the next frame's paint: a poll interval, not a guess at the app's state
