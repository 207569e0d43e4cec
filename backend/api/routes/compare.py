"""/api/compare: runs side by side, ratios against a baseline, savings waterfalls; and
/api/compare/groups, /api/compare/curves: the same for seed groups, with CIs, bands and
paired significance tests (docs/comparisons.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import StringConstraints
from fastapi.exceptions import RequestValidationError

from backend.api.deps import ReadAccess, SessionDep
from backend.api.errors import NOT_FOUND
from backend.db.runs import get_run
from backend.schemas import ComparePublic, GroupComparePublic, GroupCurvesPublic
from backend.services.compare import compare_runs
from backend.services.group_compare import compare_groups
from backend.services.group_curves import XAxis, group_curves, parse_eval_key
from backend.services.groups import Group, GroupError, auto_groups, explicit_groups, make_unique
from backend.services.groups import default_baseline as default_group_baseline
from backend.services.metric_reads import dumps

router = APIRouter(tags=["compare"], dependencies=[ReadAccess])


def parse_ids(raw: list[str], field: str = "run_ids") -> list[int]:
    """``run_ids=1,2&run_ids=3`` -> [1, 2, 3] (order kept, duplicates dropped); 422 on junk."""
    ids: list[int] = []
    for part in raw:
        for tok in part.split(","):
            tok = tok.strip()
            if not tok:
                continue
            if not tok.isdigit() or not 1 <= int(tok) < 2**63:
                raise RequestValidationError([{"type": "int_parsing", "loc": ["query", field],
                                               "msg": f"run ids must be positive integers, comma-separated; got {tok!r}", "input": tok}])
            ids.append(int(tok))
    ids = list(dict.fromkeys(ids))
    if not ids or len(ids) > 50:
        raise RequestValidationError([{"type": "value_error", "loc": ["query", field],
                                       "msg": f"give between 1 and 50 run ids, e.g. {field}=3,4,5", "input": raw}])
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
    and measured savings waterfalls and the compute each run needed to reach fractions of the
    baseline's accuracy gain (``reach``; see docs/api.md)."""
    ids = parse_ids(run_ids)
    if baseline is not None and baseline not in ids:
        ids.append(baseline)
    runs = [get_run(session, i) for i in ids]
    return compare_runs(session, runs, baseline)


IdList = Annotated[str, StringConstraints(pattern=r"^ *[0-9]{1,18}( *, *[0-9]{1,18}){0,49} *$")]
RunIdsQuery = Annotated[list[IdList] | None, Query(max_length=50, description=(
    "Run ids, comma-separated and/or repeated; grouped automatically into seed groups (same config but the seed)."))]
GroupsQuery = Annotated[list[IdList] | None, Query(max_length=20, description=(
    "Explicit seed groups, one per value: `groups=1,2,3&groups=4,5,6`. Each group's runs must differ only by seed."))]
BaselineQuery = Annotated[int | None, Query(ge=1, le=2**63 - 1, description=(
    "A run id: its group is the baseline. Default: the first GRPO group, else the first group."))]
AlphaQuery = Annotated[float, Query(gt=0.0, lt=0.5, description="1 - confidence level of every interval (0.05: 95%).")]


def _invalid(field: str, msg: str, value) -> RequestValidationError:
    return RequestValidationError([{"type": "value_error", "loc": ["query", field], "msg": msg, "input": value}])


def resolve_groups(session, run_ids: list[str] | None, groups: list[str] | None, baseline: int | None) -> tuple[list[Group], str]:
    """Seed groups from ``groups`` (explicit, checked) and ``run_ids`` (grouped by config), and
    the baseline group's key. 422 naming the parameter on bad input, 404 on an unknown run."""
    if not run_ids and not groups:
        raise _invalid("run_ids", "give run_ids=... (grouped by config) and/or groups=... (explicit seed groups)", None)
    explicit = [[get_run(session, i) for i in parse_ids([g], "groups")] for g in groups or []]
    taken = {r.id for rs in explicit for r in rs}
    if len(taken) != sum(len(rs) for rs in explicit):
        raise _invalid("groups", "a run can be in only one group", groups)
    rest = [get_run(session, i) for i in parse_ids(run_ids, "run_ids") if i not in taken] if run_ids else []
    if len(taken) + len(rest) > 100:
        raise _invalid("run_ids", "compare at most 100 runs at once", run_ids)
    try:
        out = explicit_groups(explicit)
    except GroupError as e:
        raise _invalid("groups", str(e), groups) from None
    out = make_unique(out + (auto_groups(rest) if rest else []))  # loose runs of an explicit group's config stay apart
    if baseline is None:
        return out, default_group_baseline(out)
    holder = next((g for g in out if baseline in g.run_ids), None)
    if holder is None:
        get_run(session, baseline)  # 404 if it does not exist at all
        raise _invalid("baseline", f"run {baseline} is not among the compared runs", baseline)
    return out, holder.key


def cached_json(request: Request, groups: list[Group], params: tuple, build) -> Response:
    """The JSON answer of ``build()``, from the API's response cache while no compared run has
    changed: the key holds every run's (id, metrics_version, status), and each step or eval
    write bumps metrics_version."""
    cache = request.app.state.metrics_cache
    runs = tuple((g.key, tuple((r.id, r.metrics_version, r.status) for r in g.runs)) for g in groups)
    body = cache.get_or_build((request.url.path, runs, params), lambda: dumps(build())) if cache is not None else dumps(build())
    return Response(body, media_type="application/json")


@router.get("/compare/groups", response_model=GroupComparePublic, responses=NOT_FOUND)
def compare_seed_groups(request: Request, session: SessionDep, run_ids: RunIdsQuery = None, groups: GroupsQuery = None,
                        baseline: BaselineQuery = None, alpha: AlphaQuery = 0.05):
    """Seed groups side by side: every /compare number as mean and Student-t CI across seeds,
    ratios to the baseline group per seed pair, per benchmark a paired permutation test
    against the baseline over the problems (p-values as in the paper's Table 1), and the
    compute each group needs to reach fractions of the baseline's accuracy gain (``reach``;
    see docs/comparisons.md)."""
    gs, base = resolve_groups(session, run_ids, groups, baseline)
    return cached_json(request, gs, (base, alpha), lambda: compare_groups(session, gs, base, alpha))


@router.get("/compare/curves", response_model=GroupCurvesPublic, responses=NOT_FOUND)
def compare_curves(
    request: Request,
    session: SessionDep,
    keys: Annotated[str, Query(max_length=2000, description=(
        "Keys, comma-separated (at most 8): step metrics (reward/mean) and/or evaluations as eval/<benchmark>/<metric>, "
        "metric avg_at_k or pass_at_k (eval/overall/avg_at_k: held-out Avg@k pooled over benchmarks)."))],
    run_ids: RunIdsQuery = None, groups: GroupsQuery = None,
    x: Annotated[XAxis, Query(description="step, cumulative FLOPs (flops/total) or wall seconds (time/elapsed_s).")] = "step",
    points: Annotated[int, Query(ge=10, le=2000, description="Grid points per curve.")] = 200,
    alpha: AlphaQuery = 0.05,
    smooth: Annotated[int, Query(ge=1, le=50, description=(
        "Eval keys only: trailing mean over this many evaluations, per run, before averaging seeds "
        "(3 = the smoothing of the compute-to-reach table; 1 = raw)."))] = 1,
):
    """Each seed group's mean curve with a (1 - alpha) Student-t band across its seeds, on a
    common grid of the chosen x axis (seeds interpolated, never extrapolated). Eval keys give
    held-out accuracy at the eval steps, on the same axis (evaluation is not on it)."""
    names = list(dict.fromkeys(k.strip() for k in keys.split(",") if k.strip()))
    if not names or len(names) > 8:
        raise _invalid("keys", "give 1 to 8 metric keys, comma-separated, e.g. keys=reward/mean,zero_acc/after_rescue", keys)
    for name in names:
        try:
            parse_eval_key(name)
        except ValueError as e:
            raise _invalid("keys", str(e), keys) from None
    gs, _ = resolve_groups(session, run_ids, groups, None)
    return cached_json(request, gs, (tuple(names), x, points, alpha, smooth),
                       lambda: group_curves(session, gs, names, x, points, alpha, smooth))
