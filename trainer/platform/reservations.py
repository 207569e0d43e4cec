"""No starvation: a multi-GPU run that has waited too long holds smaller runs back until it is placed.

Ray reserves nothing for a request it cannot meet yet: a pending placement group of 4 GPUs keeps
no GPU for itself, and Ray serves pending requests in no fixed order, so on a box where 1-GPU runs
come and go each GPU that frees is taken again by the next 1-GPU request before four are ever free
together, and the 4-GPU run can wait for ever (benchmarks/fairness_wait.py measures it).

The operator's remedy is ``AERO_STARVATION_S`` (default 300 s; 0 turns it off). A run asking for
more than one GPU that has waited longer than that *registers* on the cluster's reservation board.
From then on a run asking for fewer GPUs that is not starving itself *holds back*: it withdraws its
pending request and asks Ray for nothing until the starving run is placed, stopped or dead. The
small runs already placed end as they would, and nothing else takes the GPUs they free.

The board is one named, detached Ray actor per cluster (:class:`ReservationBoard`), in a namespace
of its own: every run is a Ray job in a namespace of its own and the board must outlive each of
them. An entry is renewed at each poll of its run's wait and expires :data:`TTL_S` after the last
renewal, so a run whose process died (a killed worker) stops holding the others back within that
time. Everything fails open: a board that cannot be reached holds nobody back, which is the
platform without the limit, never a run that waits for a board.

trainer/platform/placement.py asks a :class:`Reservation` before each placement request and at each poll
while it waits (``node_groups``: verl runs; ``hold_local_gpus``: the embedded engine's holders).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

LIMIT_ENV = "AERO_STARVATION_S"
DEFAULT_LIMIT_S = 300.0
BOARD_NAME = "aero-reservations-v1"  # versioned: a long-lived cluster may keep an older board's actor
BOARD_NAMESPACE = "aero-reservations"
TTL_S = 15.0  # an entry not renewed this long belongs to a run that died
CALL_S = 5.0  # the longest a run waits for the board's answer before going on without it


def starvation_limit(environ: dict[str, str] | None = None) -> float:
    """The operator's ``AERO_STARVATION_S``: seconds a multi-GPU run waits before smaller runs hold
    back for it (0: never). The worker checks the value when it starts (worker/settings.py)."""
    env = os.environ if environ is None else environ
    raw = env.get(LIMIT_ENV, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_LIMIT_S
    except ValueError:
        raise ValueError(f"{LIMIT_ENV} must be a number of seconds (0 = off); got {raw!r}") from None
    if value < 0 or value != value:
        raise ValueError(f"{LIMIT_ENV} must be >= 0 seconds (0 = off); got {raw!r}")
    return value


def holds_back(gpus: int, entries: dict[str, dict], own_key: str = "") -> dict | None:
    """The registered starving run that a run asking for ``gpus``, not starving itself, must hold
    back for: the largest one asking for more than it (its entry), or None. A run asking for as
    many GPUs or more competes on equal terms: holding it back would free nothing the starving run
    could use sooner than Ray gives it."""
    bigger = [e for k, e in entries.items() if k != own_key and int(e.get("gpus", 0)) > gpus]
    return max(bigger, key=lambda e: int(e["gpus"])) if bigger else None


def fits(node_gpus: dict[str, float], gpus_per_node: int, nodes: int, node_id: str | None = None) -> bool:
    """Whether a cluster whose live nodes have ``node_gpus`` GPUs in all could ever place the
    request (on ``node_id`` when pinned there). A request that could not never registers: it would
    hold every smaller run back while it waits for GPUs to join the cluster."""
    if node_id is not None:
        return node_gpus.get(node_id, 0.0) >= gpus_per_node
    return sum(1 for total in node_gpus.values() if total >= gpus_per_node) >= nodes


class ReservationBoard:
    """The cluster's starving runs: ``{key: {"gpus", "since", "expires"}}``, kept by one actor (one
    process, one clock, calls served one at a time: a registration is seen by every later check)."""

    def __init__(self) -> None:
        self.entries: dict[str, dict] = {}

    def register(self, key: str, gpus: int, waited_s: float, ttl_s: float = TTL_S) -> None:
        """Add or renew ``key``'s entry for ``ttl_s`` more seconds."""
        since = self.entries.get(key, {}).get("since", time.time() - waited_s)
        self.entries[key] = {"gpus": int(gpus), "since": since, "expires": time.monotonic() + ttl_s}

    def unregister(self, key: str) -> None:
        self.entries.pop(key, None)

    def starving(self) -> dict[str, dict]:
        """The live entries (expired ones dropped): ``{key: {"gpus", "since"}}``."""
        now = time.monotonic()
        self.entries = {k: e for k, e in self.entries.items() if e["expires"] > now}
        return {k: {"gpus": e["gpus"], "since": e["since"]} for k, e in self.entries.items()}


_board_class: Any = None


def board(create: bool = False) -> Any | None:
    """The connected cluster's board (an actor handle), made when ``create`` and missing; None when
    there is none (no run has starved on this cluster yet)."""
    global _board_class
    import ray

    try:
        return ray.get_actor(BOARD_NAME, namespace=BOARD_NAMESPACE)
    except ValueError:
        if not create:
            return None
    if _board_class is None:
        _board_class = ray.remote(num_cpus=0)(ReservationBoard)
    return _board_class.options(name=BOARD_NAME, namespace=BOARD_NAMESPACE, lifetime="detached",
                                get_if_exists=True).remote()


def node_gpus() -> dict[str, float]:
    """GPUs of each live node of the connected cluster, free or not."""
    import ray

    return {n["NodeID"]: n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n.get("Alive")}


def _new_key() -> str:
    return f"{os.getpid()}-{random.getrandbits(48):012x}"


@dataclass
class Reservation:
    """One placement request's side of the board: what it asks for, since when it waits, and
    whether it holds smaller runs back (``registered``) or must hold back for a bigger one.
    Ask :meth:`blocker` before each request to Ray and at each poll; :meth:`release` at the end."""

    gpus_per_node: int
    nodes: int = 1
    limit_s: float = field(default_factory=starvation_limit)
    node_id: str | None = None  # the node the request is pinned to (an embedded run's holder)
    key: str = field(default_factory=_new_key)
    since: float = field(default_factory=time.monotonic)
    registered: bool = False
    feasible: bool | None = None  # whether the cluster could ever place it (asked once, when it starves)
    handle: Any = field(default=None, repr=False)

    @classmethod
    def of(cls, gpus_per_node: int, nodes: int, starvation_s: float | None, shared: bool,
           node_id: str | None = None) -> Reservation:
        """A request's reservation with limit ``starvation_s``; None: the operator's
        ``AERO_STARVATION_S`` on a ``shared`` cluster (the operator's), and off on a Ray of the run's
        own, where no other run competes and a board would be one more process for nothing."""
        if starvation_s is None:
            starvation_s = starvation_limit() if shared else 0.0
        return cls(gpus_per_node, nodes, limit_s=starvation_s, node_id=node_id)

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    def starving(self) -> bool:
        """Waited past the limit asking for more than one GPU. A 1-GPU request takes the first GPU
        that frees, so only a larger one can starve."""
        return 0 < self.limit_s < time.monotonic() - self.since and self.gpus > 1

    def blocker(self, waiting: bool = False) -> dict | None:
        """The starving run's entry this request must hold back for, or None to go on. A starving
        request registers (or renews its entry) here instead, and never holds back. A multi-GPU
        request that is ``waiting`` (Ray has not met it at its first poll) makes the cluster's
        board if there is none yet: an actor takes seconds to start, and smaller runs should see
        the entry as soon as it starves, not that much later."""
        if self.limit_s <= 0:
            return None
        if self.starving():
            self._register()
            return None
        if waiting and self.gpus > 1 and self.handle is None:
            self.handle = _safely(lambda: board(create=True), None)
        return holds_back(self.gpus, self._entries(), self.key)

    def note(self) -> str:
        """What the run's ``waiting_for`` adds while it holds smaller runs back."""
        return f"; smaller runs hold back for it (it waited over {self.limit_s:g} s, {LIMIT_ENV})" if self.registered else ""

    def release(self) -> None:
        """Unregister (placed, stopped or failed): smaller runs go on at their next poll."""
        if self.registered and self.handle is not None:
            self._call(self.handle.unregister, self.key)
        self.registered = False

    def _register(self) -> None:
        if self.feasible is None:
            self.feasible = _safely(lambda: fits(node_gpus(), self.gpus_per_node, self.nodes, self.node_id), True)
        if not self.feasible:
            return
        self.handle = self.handle or _safely(lambda: board(create=True), None)
        if self.handle is not None:
            ok, _ = self._call(self.handle.register, self.key, self.gpus, time.monotonic() - self.since)
            self.registered = self.registered or ok

    def _entries(self) -> dict[str, dict]:
        self.handle = self.handle or _safely(board, None)
        if self.handle is None:
            return {}
        ok, entries = self._call(self.handle.starving)
        if not ok:
            self.handle = None  # gone or stuck: look it up again next time
        return entries if ok else {}

    def _call(self, method: Any, *args: Any) -> tuple[bool, Any]:
        """(answered, the answer) of one board call."""
        import ray

        return _safely(lambda: (True, ray.get(method.remote(*args), timeout=CALL_S)), (False, None))


def _safely(fn: Any, default: Any) -> Any:
    """``fn()``, or ``default`` when the board or the cluster cannot answer (fail open)."""
    try:
        return fn()
    except Exception:  # noqa: BLE001  (an actor died, a timeout, a cluster gone: hold nobody back)
        return default
