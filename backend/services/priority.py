"""A run's priority: what the submitter may ask for.

A run (or every run of a sweep) carries ``priority``, 0..10, default 0. The workers claim a
queue's higher-priority runs first, before the fair share (backend/db/fair_share.py), so the
operator caps it per role: ``AERO_PRIORITY_MAX_ADMIN`` (default 10) and
``AERO_PRIORITY_MAX_MEMBER`` (default 5). A viewer submits nothing, so has no cap. A
submission above the caller's cap answers 422 naming ``priority``, and nothing is stored.
"""

from __future__ import annotations

from typing import Any

from fastapi.exceptions import RequestValidationError

PRIORITY_MAX = 10  # the field's own bound (schemas: RunCreate, SweepCreate)


def priority_cap(settings: Any, role: str) -> int:
    """The highest priority ``role`` may give a run (0 for a role that may not submit)."""
    return {"admin": settings.priority_max_admin, "member": settings.priority_max_member}.get(role, 0)


def check_priority(priority: int, settings: Any, role: str) -> None:
    """Refuse (422 at ``body.priority``) a priority above the caller's role's cap."""
    cap = priority_cap(settings, role)
    if priority > cap:
        var = f"AERO_PRIORITY_MAX_{role.upper()}"
        raise RequestValidationError([{
            "type": "priority_cap", "loc": ["body", "priority"], "input": priority,
            "msg": f"priority: {priority} is above what a {role} may ask for ({cap}, the operator's {var}); "
                   f"ask for at most {cap}, or ask an admin to submit it"}])
