"""Soak the lab under load with faults injected, then check that nothing was lost.

What it starts (all its own, so it may kill and restart them; nothing shared is touched):

* a PostgreSQL cluster (``initdb`` into a temp dir, trust auth, ``pg_ctl -o "-p PORT -k DIR"``,
  run as the ``postgres`` user when this runs as root) and a ``redis-server`` on their own ports;
  ``--store sqlite`` uses the embedded default instead (SQLite store + its SQLite broker, no
  servers), and ``--database-url`` an existing PostgreSQL store (then PostgreSQL is not restarted);
* the run directory (``<data>/runs``) on a tmpfs of ``--tmpfs-mb`` (so the disk can be filled);
* the API (``python -m uvicorn backend.main:app``, as the tests and ``aero up`` start it), the
  reaper and ``--workers`` Celery workers, with DATABASE_URL / REDIS_URL pointing at the above.

The load: ``--users`` members (tokens made in the store, as ``aero token create`` does) submit
``--runs`` short runs in all (tiny preset, ``--steps`` steps, a checkpoint every step) over REST,
as sweeps and single runs: the first user opens with a backlog (4 runs per worker), the others
start ``--user-stagger-s`` apart behind it, and the rest is paced over the soak; ``--sse`` clients
follow the live metric streams of running runs (reconnecting with Last-Event-ID when a stream
breaks); ``--pollers`` clients read runs' metrics with the API's response cache off. Once, a
flooding user sends ``--flood-rps`` requests a second for ``--flood-s`` seconds (valid PATCHes,
invalid and oversized POSTs, async httpx, from a process of its own) against the API's rate limit.
The workers train at the platform's CPU priority (``AERO_WORKER_NICE``, default 10: the API and
the store answer first on a shared host); ``--worker-nice 0`` trains at the API's priority.

Submissions and faults are spread over ``--duration-s`` (default: 15 s per fault + 30 s), then
the runs drain. The faults, at seeded random times, one at a time, each recorded with its time
window: SIGKILL a worker's process group and start a new worker; restart Redis (SIGKILL, then
start it on the same files); restart PostgreSQL (``pg_ctl restart -m fast``); SIGKILL the API
and start it again on the same port; fill the run directory's filesystem (shrink the tmpfs to
what it holds with ``mount -o remount,size=``, write a filler file until ENOSPC, keep it full for
``--disk-full-s`` and until a run was caught in it, delete the filler, grow the tmpfs back); and
SIGKILL the worker of a run that has a checkpoint and steps to go, truncate that checkpoint's
state.pt to half its size, start a new worker (which resumes the run). A fault that needs a run
in progress and finds none within 3 s submits one of its own (user ``soak-target``).
``--store sqlite`` has no Redis or PostgreSQL to restart. The flood is time-boxed to
``--flood-s``: the report gives the rate the client reached (a loaded 2-core box does not send
1,000 httpx requests a second: ~140), and ``--rate-limit`` (per API process) defaults to 20/s so
that rate is well over it. The API runs as the compose file runs it (``python -m backend.serve
--workers 2``); each response's ``Server-Timing`` gives the API's own share of a read's latency.

Redis persistence: the broker must not lose a task message across a restart (the reaper does not
re-send queued runs: docs/deploy.md), so Redis runs with ``--appendonly yes --appendfsync
always`` (every write on disk before Redis answers) and is restarted with SIGKILL, a crash.
``--redis-persistence none`` (``--save "" --appendonly no``) shows what is lost without it.

What is checked (exit code 1 if any invariant is broken; latencies are reported, not asserted):

* every run in the store reaches a terminal state (nothing queued or running is left);
* every run's stored steps are 1..k with no gap; every succeeded run has each of its steps
  exactly once in the step log and in the columnar copy the API reads, with the same values,
  its row at the last step, and its final checkpoint file agreeing with the stored last step
  (step and training time). The worker keeps no metrics.jsonl of its own (its only metric sink
  is the store's DbSink; JsonlSink is ``aero train``'s), so the checkpoint file is the record on
  disk that the store is checked against;
* a run that failed did so for a reason the harness caused: a full disk (the cause names it),
  the checkpoint it truncated (the cause names the checkpoint), or a submission refused while
  the broker or store was down (503); any other failure is a violation;
* every run's newest announced checkpoint (the ``checkpoints`` table) is the file its
  ``checkpoints/latest`` names and loads with torch, except the one the harness truncated;
* each user's first run starts within one run's time (the longest single-attempt run, + 5 s)
  of its submission, unless a fault window overlaps the wait;
* SSE clients that followed a run to its end received every stored step once, across API
  restarts (reconnecting with Last-Event-ID);
* the flood gets 429s, each with Retry-After, and 413s for oversized bodies, while the other
  users' reads get no 429.

Reported: counts of everything, fault windows, the uncached metric read p50/p99 and the
step-to-SSE-event p50/p99 (from the step's row write, ``step_metrics.logged_at``, to the event's
arrival) outside fault windows (+ ``--grace-s``) and apart from the flood (targets 100 ms and
300 ms; the harness shares the machine's cores with everything it measures), and the other
users' read latency during the flood.

Needs root for the tmpfs (``mount``; without it the disk-full fault is skipped and said so); as
root it runs PostgreSQL as the ``postgres`` user. Workers get ``AERO_MAX_ATTEMPTS=10``
(``--max-attempts``), above the faults one run can meet, so that recovery is what is tested. Cleans up every process, mount and temp dir it made, also on
errors and on SIGTERM / Ctrl-C (``--keep`` keeps the temp dir: logs, store).

    .venv/bin/python -m benchmarks.soak --workers 3 --users 5 --runs 60
    .venv/bin/python -m benchmarks.soak --store sqlite --workers 2 --runs 20 --sse 10 --pollers 5
"""

from benchmarks.soak.harness import run
from benchmarks.soak.options import Options

__all__ = ["Options", "run"]
