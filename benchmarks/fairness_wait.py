"""How long a 4-GPU run waits behind a stream of 1-GPU runs, with and without the starvation
limit (``AERO_STARVATION_S``, trainer/platform/reservations.py).

A Ray head owns GPUS logical GPUs (as ``aero worker --gpus 0,1,2,3`` starts it). STREAMS threads
each place a 1-GPU placement group (``trainer.platform.placement.node_groups``, the verl runs' path), hold
it for a random 0.3-0.6 s, release it and place the next one at once: a lab whose small runs come
and go without pause. Once every stream holds a GPU, one run asks for BIG GPUs on one node. Its
wait is measured in seconds and in hand-overs: the 1-GPU placements Ray granted while it waited.
With the limit (LIMIT s) the small runs hold back once it has waited that long; with the limit 0
(off) nothing holds them back, and the wait is cut at MAX_WAIT s.

    python benchmarks/fairness_wait.py [--reps 3] [--limit 2] [--gpus 4] [--big 4] [--streams 2]
                                       [--max-wait 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from trainer.platform import placement  # noqa: E402


@dataclass(frozen=True)
class Contention:
    """The load: ``streams`` threads of back-to-back 1-GPU placements, each held ``hold_s``
    (uniform), against one request of ``big_gpus``. The big request gives up after
    ``max_handovers`` hand-overs (0: no cap) or ``max_wait_s`` seconds."""

    big_gpus: int = 4
    streams: int = 2
    hold_s: tuple[float, float] = (0.3, 0.6)
    max_handovers: int = 0
    max_wait_s: float = 30.0
    seed: int = 0


@dataclass
class Outcome:
    placed: bool
    waited_s: float
    handovers: int  # 1-GPU placements granted while the big request waited
    small_placed: int  # all 1-GPU placements of the round


def contend(limit_s: float, load: Contention) -> Outcome:
    """One round in the connected Ray session (``placement.ray_session``): start the streams, wait
    until each holds a GPU, then place the big request with starvation limit ``limit_s`` (the
    streams use the same limit: 0 turns the mechanism off for all). Stops the streams after."""
    lock, stop = threading.Lock(), threading.Event()
    granted: list[float] = []
    errors: list[BaseException] = []

    def stream(i: int) -> None:
        rng = random.Random(load.seed * 1000 + i)
        try:
            while not stop.is_set():
                groups = placement.node_groups(1, 1, should_stop=stop.is_set, starvation_s=limit_s)
                if groups is None:
                    return
                with lock:
                    granted.append(time.monotonic())
                stop.wait(rng.uniform(*load.hold_s))
                placement.release_groups(groups)
        except BaseException as e:  # noqa: BLE001  (reported by the caller)
            errors.append(e)

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(load.streams)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(granted) < load.streams and not errors:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    t0 = time.monotonic()

    def since_start() -> int:
        with lock:
            return sum(1 for t in granted if t >= t0)

    def give_up() -> bool:
        return bool(errors) or (0 < load.max_handovers <= since_start()) or time.monotonic() - t0 > load.max_wait_s

    big = placement.node_groups(load.big_gpus, 1, should_stop=give_up, starvation_s=limit_s)
    t1 = time.monotonic()
    stop.set()
    for t in threads:
        t.join(30)
    if big is not None:
        placement.release_groups(big)
    if errors:
        raise errors[0]
    with lock:
        return Outcome(big is not None, t1 - t0, sum(1 for t in granted if t0 <= t < t1), len(granted))


def warm_board() -> None:
    """Start the cluster's reservation board and wait until it answers, as on a cluster where a
    run has starved before: its actor's first start (seconds on a busy host) is not what the rounds
    measure (the first small runs would wait for it, up to trainer.platform.reservations.CALL_S)."""
    import ray

    from trainer.platform import reservations

    board = reservations.board(create=True)
    assert board is not None
    ray.get(board.starving.remote(), timeout=120)


def table(rows: list[dict]) -> str:
    """The rounds as a Markdown table."""
    out = ["| rep | limit | placed | wait (s) | hand-overs |", "|---|---|---|---|---|"]
    for r in rows:
        limit = f"{r['limit_s']:g} s" if r["limit_s"] else "off (0)"
        wait = f"{r['waited_s']:.1f}" + ("" if r["placed"] else " (cut)")
        out.append(f"| {r['rep']} | {limit} | {'yes' if r['placed'] else 'no'} | {wait} | {r['handovers']} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--limit", type=float, default=2.0, help="AERO_STARVATION_S of the rounds with the mechanism")
    ap.add_argument("--gpus", type=int, default=4, help="logical GPUs of the Ray head")
    ap.add_argument("--big", type=int, default=4, help="GPUs the big run asks for")
    ap.add_argument("--streams", type=int, default=2, help="threads placing 1-GPU groups back to back")
    ap.add_argument("--max-wait", type=float, default=30.0, help="seconds after which a round gives up")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    from worker import ray_head

    os.environ.update(ray_head.auth_env())
    head, address = ray_head.start_head([str(i) for i in range(args.gpus)])
    rows: list[dict] = []
    try:
        with placement.ray_session(address=address):
            warm_board()
            for rep in range(1, args.reps + 1):
                for limit in (args.limit, 0.0):
                    load = Contention(big_gpus=args.big, streams=args.streams, max_wait_s=args.max_wait, seed=rep)
                    got = contend(limit, load)
                    rows.append({"rep": rep, "limit_s": limit, **asdict(got)})
                    print(f"rep {rep} limit {limit:g}: {got}", file=sys.stderr, flush=True)
    finally:
        ray_head.stop_head(head)
    print(table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rounds": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
