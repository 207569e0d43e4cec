"""A small HTTP client for the AERO Lab REST API (docs/api.md). The dashboard talks to the
backend through this module only (docs/architecture.md §1): no store, no trainer imports.

Every failure is an :class:`ApiError` with a ``kind`` the pages turn into a sentence:

=============  ==========================================================
kind           when
=============  ==========================================================
``down``       no answer (connection refused, DNS, timeout)
``auth``       401 / 403: missing, wrong or revoked token
``not_found``  404
``invalid``    422: ``field_errors`` maps each config field to its message
``conflict``   409 (e.g. deleting a running run)
``server``     5xx (503: the broker is unreachable)
``client``     any other 4xx
=============  ==========================================================

Connection settings come from the environment that ``aero up`` sets: ``AERO_API_URL`` and
``AERO_API_TOKEN``; without a token, ``<AERO_DATA_DIR>/admin.token`` (what ``aero up`` writes).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

DEFAULT_API_URL = "http://127.0.0.1:8000"
TOKEN_FILE = "admin.token"
FINISHED = frozenset({"succeeded", "failed", "cancelled"})


# ---------------------------------------------------------------- settings


def api_url_from_env(env: Mapping[str, str] | None = None) -> str:
    """``AERO_API_URL`` without a trailing slash, else http://127.0.0.1:8000."""
    env = os.environ if env is None else env
    return (env.get("AERO_API_URL") or DEFAULT_API_URL).rstrip("/")


def asks_for_token(env: Mapping[str, str] | None = None) -> bool:
    """AERO_DASHBOARD_ASK_TOKEN=1: a dashboard others can reach (``aero up --host 0.0.0.0``,
    docker compose) holds no token of its own; each user enters theirs under Settings."""
    env = os.environ if env is None else env
    return (env.get("AERO_DASHBOARD_ASK_TOKEN") or "").strip().lower() in ("1", "true", "yes")


def token_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """``AERO_API_TOKEN``, else the first line of ``<AERO_DATA_DIR or ./aero-data>/admin.token``;
    None when the dashboard asks its users for a token (:func:`asks_for_token`)."""
    env = os.environ if env is None else env
    if asks_for_token(env):
        return None
    if env.get("AERO_API_TOKEN"):
        return env["AERO_API_TOKEN"].strip()
    path = Path(env.get("AERO_DATA_DIR") or "aero-data").expanduser() / TOKEN_FILE
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


# ---------------------------------------------------------------- errors


@dataclass
class ApiError(Exception):
    """A failed API call. ``message`` is one readable sentence; ``detail`` is the API's body."""

    kind: str
    message: str
    status: int | None = None
    detail: Any = None
    field_errors: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message


def field_errors_of(detail: Any, prefixes: Sequence[str] = ("body", "config", "base")) -> dict[str, str]:
    """FastAPI 422 items -> {dotted field: message}, dropping leading ``body``/``config``/``base``.

    >>> field_errors_of([{"loc": ["body", "config", "aero", "n_explore"], "msg": "too big"}])
    {'aero.n_explore': 'too big'}
    """
    out: dict[str, str] = {}
    if not isinstance(detail, list):
        return out
    for item in detail:
        if not isinstance(item, dict):
            continue
        loc = [str(p) for p in item.get("loc", [])]
        while loc and loc[0] in prefixes:
            loc = loc[1:]
        key = ".".join(loc) or "config"
        msg = str(item.get("msg", "invalid"))
        out[key] = f"{out[key]}; {msg}" if key in out else msg
    return out


def _detail_text(detail: Any) -> str:
    if isinstance(detail, list):
        return "; ".join(str(i.get("msg", i)) if isinstance(i, dict) else str(i) for i in detail)
    return str(detail)


def error_from_response(resp: httpx.Response) -> ApiError:
    """Classify a >= 400 response."""
    try:
        detail = resp.json().get("detail", resp.text)
    except (ValueError, AttributeError):
        detail = resp.text
    code, text = resp.status_code, _detail_text(detail)
    if code in (401, 403):
        return ApiError("auth", f"The API refused the token ({code}): {text}. Set a valid token in the sidebar "
                                "(or AERO_API_TOKEN); `aero token create NAME` makes one.", code, detail)
    if code == 404:
        return ApiError("not_found", f"Not found: {text}.", code, detail)
    if code == 409:
        return ApiError("conflict", f"Not possible now: {text}.", code, detail)
    if code == 422:
        return ApiError("invalid", f"The API rejected the input: {text}", code, detail, field_errors_of(detail))
    if code >= 500:
        return ApiError("server", f"The API failed ({code}): {text}", code, detail)
    return ApiError("client", f"The API answered {code}: {text}", code, detail)


# ---------------------------------------------------------------- client


def _csv(items: Iterable[Any]) -> str:
    return ",".join(str(i) for i in items)


def _group_params(run_ids: Sequence[int], groups: Sequence[Sequence[int]], **extra: Any) -> dict[str, Any]:
    """Query of the seed-group endpoints: ``run_ids=1,2,3`` and one ``groups=4,5`` per explicit group."""
    params: dict[str, Any] = {k: v for k, v in extra.items() if v is not None}
    if run_ids:
        params["run_ids"] = _csv(run_ids)
    if groups:
        params["groups"] = [_csv(g) for g in groups]
    return params


class AeroClient:
    """Thin wrapper over the REST API; methods return the decoded JSON bodies (plain dicts)."""

    def __init__(self, base_url: str | None = None, token: str | None = None, timeout: float = 10.0):
        self.base_url = (base_url or api_url_from_env()).rstrip("/")
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url + "/api", headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, **kw) -> Any:
        """One call; the JSON body (None for 204), else :class:`ApiError`."""
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise ApiError("down", f"Cannot reach the AERO Lab API at {self.base_url} ({type(e).__name__}). "
                                   "Start the platform with `aero up`, or point AERO_API_URL at a running API.") from None
        if resp.status_code >= 400:
            raise error_from_response(resp)
        if not resp.content:
            return None
        if "json" not in resp.headers.get("content-type", ""):
            return resp.content
        return resp.json()

    # -- reads
    def health(self) -> dict:
        return self.request("GET", "/health")

    def methods(self) -> list[dict]:
        """The training methods' specs (name, label, colour, config section, ...), in display order."""
        return self.request("GET", "/methods")["methods"]

    def openapi(self) -> dict:
        """The OpenAPI document (served at /openapi.json, outside /api)."""
        return self.request("GET", self.base_url + "/openapi.json")

    def me(self) -> dict:
        """The token's user, role and quota usage (GET /api/me; 401 without a valid token)."""
        return self.request("GET", "/me")

    def list_runs(self, *, status: Sequence[str] = (), method: Sequence[str] = (), tag: str | None = None,
                  sweep_id: int | None = None, owner: str | None = None, limit: int = 200, offset: int = 0) -> dict:
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if owner:
            params["owner"] = owner
        if status:
            params["status"] = list(status)
        if method:
            params["method"] = list(method)
        if tag:
            params["tag"] = tag
        if sweep_id is not None:
            params["sweep_id"] = sweep_id
        return self.request("GET", "/runs", params=params)

    def get_run(self, run_id: int) -> dict:
        return self.request("GET", f"/runs/{run_id}")

    def metrics(self, run_id: int, keys: Sequence[str] | None = None, *, max_points: int = 1000,
                since_step: int | None = None) -> dict:
        """Columnar metrics ``{steps, series, stored_steps, last_step, run_status}``, decimated server-side."""
        params: dict[str, Any] = {"max_points": max_points}
        if keys:
            params["keys"] = _csv(keys)
        if since_step is not None:
            params["since_step"] = since_step
        return self.request("GET", f"/runs/{run_id}/metrics", params=params)

    def metric_keys(self, run_id: int) -> list[str]:
        """Every metric key the run logged (``GET /runs/{id}/metrics/keys``), sorted."""
        return self.request("GET", f"/runs/{run_id}/metrics/keys")["keys"]

    def rollouts(self, run_id: int, step: int | None = None, *, stratum: str | None = None, stage: str | None = None,
                 min_reward: float | None = None, max_reward: float | None = None, offset: int = 0, limit: int = 50) -> dict:
        """A page of one step's stored rollouts ``{step, data, count, offset, limit, steps}``; step None: the last."""
        params = {k: v for k, v in (("step", step), ("stratum", stratum), ("stage", stage), ("min_reward", min_reward),
                                    ("max_reward", max_reward)) if v is not None}
        return self.request("GET", f"/runs/{run_id}/rollouts", params={**params, "offset": offset, "limit": limit})

    def histograms(self, run_id: int, max_steps: int = 500) -> dict:
        """Per-step fixed-bin histograms ``{steps, histograms: {name: {lo, hi, bins, counts}}}``."""
        return self.request("GET", f"/runs/{run_id}/histograms", params={"max_steps": max_steps})

    def evals(self, run_id: int, *, per_problem: bool = False) -> list[dict]:
        return self.request("GET", f"/runs/{run_id}/evals", params={"per_problem": str(per_problem).lower()})["data"]

    def compare(self, run_ids: Sequence[int], baseline: int | None = None) -> dict:
        params: dict[str, Any] = {"run_ids": _csv(run_ids)}
        if baseline is not None:
            params["baseline"] = baseline
        return self.request("GET", "/compare", params=params)

    def compare_groups(self, run_ids: Sequence[int] = (), *, groups: Sequence[Sequence[int]] = (),
                       baseline: int | None = None, alpha: float = 0.05) -> dict:
        """Seed groups side by side (``GET /compare/groups``): per group Student-t CIs across seeds,
        paired-by-seed ratios to the baseline group and per-benchmark significance tests.
        ``run_ids`` are grouped by the API (configs equal but for the seed); ``groups`` are
        explicit groups; ``baseline`` is a run id whose group is the baseline."""
        return self.request("GET", "/compare/groups", params=_group_params(run_ids, groups, baseline=baseline, alpha=alpha))

    def compare_curves(self, run_ids: Sequence[int] = (), *, groups: Sequence[Sequence[int]] = (), keys: Sequence[str] = (),
                       x: str = "step", points: int = 200, alpha: float = 0.05, smooth: int = 1) -> dict:
        """Mean curve and Student-t band across each group's seeds on a common x grid
        (``GET /compare/curves``); ``x`` is step, flops (cumulative) or time (elapsed). Keys
        may name evaluations (``eval/overall/avg_at_k``), smoothed over ``smooth`` evals per run."""
        params = _group_params(run_ids, groups, x=x, points=points, alpha=alpha, smooth=smooth)
        if keys:
            params["keys"] = _csv(keys)
        return self.request("GET", "/compare/curves", params=params)

    def list_sweeps(self, limit: int = 50, offset: int = 0) -> dict:
        return self.request("GET", "/sweeps", params={"limit": limit, "offset": offset})

    def get_sweep(self, sweep_id: int) -> dict:
        return self.request("GET", f"/sweeps/{sweep_id}")

    def export_csv(self, run_id: int) -> bytes:
        return self.request("GET", f"/runs/{run_id}/export", params={"format": "csv"})

    # -- writes (need the token)
    def create_run(self, body: dict) -> dict:
        return self.request("POST", "/runs", json=body)

    def create_sweep(self, body: dict) -> dict:
        return self.request("POST", "/sweeps", json=body)

    def cancel_run(self, run_id: int) -> dict:
        return self.request("POST", f"/runs/{run_id}/cancel")

    def delete_run(self, run_id: int) -> None:
        self.request("DELETE", f"/runs/{run_id}")

    def update_run(self, run_id: int, *, tags: Sequence[str] | None = None, notes: str | None = None) -> dict:
        body = {k: v for k, v in (("tags", None if tags is None else list(tags)), ("notes", notes)) if v is not None}
        return self.request("PATCH", f"/runs/{run_id}", json=body)

    def resume_run(self, run_id: int) -> dict:
        """Queue a failed or cancelled run again (it resumes from its last checkpoint)."""
        return self.request("POST", f"/runs/{run_id}/resume")

    def run_alerts(self, run_id: int) -> dict:
        """The run's alert rules, fired events and stop reason."""
        return self.request("GET", f"/runs/{run_id}/alerts")
