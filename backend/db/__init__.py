"""The store: models, engines/sessions, migrations, and repository functions.

Workers use ``session_scope(url)`` with the functions of :mod:`backend.db.runs` (guarded state
transitions, progress, heartbeat, cancel) and :mod:`backend.db.metrics` (idempotent upserts).
"""

from backend.db.migrate import migrate
from backend.db.models import (
    FINISHED_STATUSES,
    RUN_STATUSES,
    ApiToken,
    Base,
    Checkpoint,
    EvalResult,
    Run,
    StepMetric,
    Sweep,
)
from backend.db.session import get_engine, make_engine, make_sessionmaker, session_scope

__all__ = [
    "migrate", "Base", "Run", "StepMetric", "EvalResult", "Sweep", "ApiToken", "Checkpoint",
    "RUN_STATUSES", "FINISHED_STATUSES", "get_engine", "make_engine", "make_sessionmaker", "session_scope",
]
