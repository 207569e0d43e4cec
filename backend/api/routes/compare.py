"""/api/compare: runs side by side, ratios against a baseline, savings waterfalls."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import StringConstraints
from fastapi.exceptions import RequestValidationError

from backend.api.deps import ReadAccess, SessionDep
from backend.api.errors import NOT_FOUND
from backend.db.runs import get_run
from backend.schemas import ComparePublic
from backend.services.compare import compare_runs

router = APIRouter(tags=["compare"], dependencies=[ReadAccess])


def parse_ids(raw: list[str]) -> list[int]:
    """``run_ids=1,2&run_ids=3`` -> [1, 2, 3] (order kept, duplicates dropped); 422 on junk."""
    ids: list[int] = []
    for part in raw:
        for tok in part.split(","):
            tok = tok.strip()
            if not tok:
                continue
            if not tok.isdigit() or not 1 <= int(tok) < 2**63:
                raise RequestValidationError([{"type": "int_parsing", "loc": ["query", "run_ids"],
                                               "msg": f"run ids must be positive integers, comma-separated; got {tok!r}", "input": tok}])
            ids.append(int(tok))
    ids = list(dict.fromkeys(ids))
    if not ids or len(ids) > 50:
        raise RequestValidationError([{"type": "value_error", "loc": ["query", "run_ids"],
                                       "msg": "give between 1 and 50 run ids, e.g. run_ids=3,4,5", "input": raw}])
    return ids


@router.get("/compare", response_model=ComparePublic, responses=NOT_FOUND)
def compare(
    session: SessionDep,
    run_ids: Annotated[list[Annotated[str, StringConstraints(pattern=r"^ *[0-9]{1,18}( *, *[0-9]{1,18}){0,49} *$")]],
                       Query(min_length=1, max_length=50, description="Run ids, comma-separated and/or repeated.")],
    baseline: Annotated[int | None, Query(ge=1, le=2**63 - 1, description="Default: the first GRPO run, else the first run.")] = None,
):
    """Per run: mean step/rollout/train time, FLOPs, rollouts and tokens generated and trained,
    zero-accuracy ratios, final evals, and ratios against the baseline; plus the counterfactual
    and measured savings waterfalls (see docs/api.md)."""
    ids = parse_ids(run_ids)
    if baseline is not None and baseline not in ids:
        ids.append(baseline)
    runs = [get_run(session, i) for i in ids]
    return compare_runs(session, runs, baseline)
