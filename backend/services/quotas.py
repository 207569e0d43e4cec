"""Per-user quotas, set by the operator (environment; 0 = no limit):

==========================  ==================================================  ===============
variable                    what it limits (per user)                           where
==========================  ==================================================  ===============
``AERO_QUOTA_ACTIVE_RUNS``  queued plus running runs                            submit: 429
``AERO_QUOTA_RUN_WORK``     one run's work, ``steps x batch_prompts x n_total``  submit: 429
``AERO_QUOTA_RUNNING_RUNS`` runs running at the same time                       the workers' claim
``AERO_QUOTA_RUNNING_GPUS`` GPUs held by running runs (``resources``, logical   the workers' claim;
                            GPUs included); a run asking for more alone         submit: 429
==========================  ==================================================  ===============

A submission over a quota is refused whole (a sweep is all or nothing) with a 429 that names
the limit, its value and the user's current usage, and nothing is stored but the audit record.
A user at the running quota keeps their runs queued: the workers skip them
(worker/claim.py), so their extra runs wait instead of being refused.

Two submissions of one user are serialised by :func:`lock_user` (a write to the user's row
first in the transaction: a row lock on PostgreSQL, the database's write lock on SQLite), so
they cannot both pass a count that only one of them fits under."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from backend.db.models import Run, User


@dataclass(frozen=True)
class Quotas:
    active_runs: int = 0
    running_runs: int = 0
    run_work: int = 0
    running_gpus: int = 0

    @classmethod
    def of(cls, settings: Any) -> Quotas:
        return cls(settings.quota_active_runs, settings.quota_running_runs, settings.quota_run_work,
                   settings.quota_running_gpus)


class QuotaExceeded(Exception):
    """A submission over a quota: ``limit`` is the variable's name, ``maximum`` its value,
    ``usage`` the user's current usage and ``requested`` what the submission adds."""

    def __init__(self, user: str, limit: str, maximum: int, usage: int, requested: int, what: str):
        self.user, self.limit, self.maximum, self.usage, self.requested = user, limit, maximum, usage, requested
        super().__init__(f"quota exceeded: {limit}={maximum} {what}; {user} {self._usage_text(what)}")

    def _usage_text(self, what: str) -> str:
        if self.limit == "AERO_QUOTA_RUN_WORK":
            return f"asked for {self.requested} (steps x batch_prompts x n_total); lower one of them"
        if self.limit == "AERO_QUOTA_RUNNING_GPUS":
            return f"asked for a run of {self.requested} GPUs (resources.gpus_per_node x nodes); lower them"
        return f"has {self.usage} and this submission adds {self.requested}; wait for some to finish or cancel some"

    def body(self) -> dict[str, Any]:
        return {"limit": self.limit, "max": self.maximum, "usage": self.usage, "requested": self.requested,
                "user": self.user}


def run_work(config: Any) -> int:
    """A run's work as the quota counts it: steps x batch_prompts x n_total (``config`` a RunConfig)."""
    return int(config.steps) * int(config.batch_prompts) * int(config.n_total)


def lock_user(session: Session, user: str) -> None:
    """Serialise quota checks of ``user`` until the transaction ends (see the module docstring)."""
    session.execute(update(User).where(User.name == user).values(name=User.name))


def active_runs(session: Session, user: str) -> int:
    return session.scalar(select(func.count(Run.id)).where(Run.owner == user, Run.status.in_(("queued", "running")))) or 0


def usage(session: Session, user: str) -> dict[str, int]:
    counts = dict(session.execute(select(Run.status, func.count(Run.id)).where(
        Run.owner == user, Run.status.in_(("queued", "running"))).group_by(Run.status)).all())
    gpus = session.scalar(select(func.sum(Run.gpus)).where(Run.owner == user, Run.status == "running"))
    return {"queued": int(counts.get("queued", 0)), "running": int(counts.get("running", 0)), "running_gpus": int(gpus or 0)}


def check_submission(session: Session, quotas: Quotas, user: str, works: Sequence[int],
                     gpus: Sequence[int] = ()) -> None:
    """Raise :class:`QuotaExceeded` if adding runs of these ``works`` (holding these ``gpus``) would
    pass a quota of ``user``: a run that alone asks for more GPUs than the running quota could
    never start. Call after :func:`lock_user`, in the transaction that stores the runs."""
    if quotas.running_gpus and max(gpus, default=0) > quotas.running_gpus:
        raise QuotaExceeded(user, "AERO_QUOTA_RUNNING_GPUS", quotas.running_gpus, 0, max(gpus),
                            "allows that many GPUs held by one user's running runs")
    if quotas.run_work:
        biggest = max(works, default=0)
        if biggest > quotas.run_work:
            raise QuotaExceeded(user, "AERO_QUOTA_RUN_WORK", quotas.run_work, 0, biggest,
                                "allows a run of at most that many steps x batch_prompts x n_total")
    if quotas.active_runs:
        have = active_runs(session, user)
        if have + len(works) > quotas.active_runs:
            raise QuotaExceeded(user, "AERO_QUOTA_ACTIVE_RUNS", quotas.active_runs, have, len(works),
                                "allows that many queued plus running runs per user")


def admit(session: Session, quotas: Quotas, user: str, role: str, works: Sequence[int],
          gpus: Sequence[int] = ()) -> None:
    """Lock ``user``'s quota and check a submission of runs of these ``works``. Over a quota: the
    transaction is rolled back, the refusal is recorded in the audit log (committed on its own) and
    :class:`QuotaExceeded` raised, so nothing else is stored."""
    if not (quotas.active_runs or quotas.run_work or quotas.running_gpus):
        return
    from backend.db import audit  # the audit log is a store module; imported here to keep this one light

    lock_user(session, user)
    try:
        check_submission(session, quotas, user, works, gpus)
    except QuotaExceeded as e:
        session.rollback()
        audit.record(session, "quota.refuse", user=user, role=role, after={**e.body(), "message": str(e)})
        session.commit()
        raise
