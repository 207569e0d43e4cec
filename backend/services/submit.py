"""Hand stored runs to the queue; a run that cannot be enqueued is marked failed, never left
queued with no task behind it."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from backend.db import runs as repo
from backend.db.models import Run
from backend.queue import Enqueuer


class EnqueueError(RuntimeError):
    """The broker refused or could not be reached; ``runs`` were marked failed."""

    def __init__(self, run_ids: list[int], cause: BaseException):
        self.run_ids, self.cause = run_ids, cause
        super().__init__(f"could not enqueue run(s) {run_ids}: {cause}")


def enqueue_or_fail(session: Session, enqueue: Enqueuer, runs: Sequence[Run]) -> list[Run]:
    """Enqueue each committed run on its queue. On the first failure, mark it and every run not
    yet sent as failed (with the error text), commit, and raise :class:`EnqueueError`."""
    for i, run in enumerate(runs):
        try:
            enqueue(run.id, run.queue)
        except Exception as e:  # noqa: BLE001 - any broker error
            failed = [r.id for r in runs[i:]]
            for rid in failed:
                repo.mark_failed(session, rid, f"could not enqueue: {type(e).__name__}: {e}")
            session.commit()
            raise EnqueueError(failed, e) from e
    return list(runs)
