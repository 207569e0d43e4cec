"""Request and response bodies (full-stack-fastapi-template's ladder: XCreate / XUpdate /
XPublic / XsPublic). Run configs are trainer.config.RunConfig, so the OpenAPI schema documents
every hyperparameter with its paper default."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from trainer.config import Method, RunConfig, SharedConfig, no_control_chars  # trainer.safetext's, re-exported
from backend.services.configs import json_safety_issues, json_shape_issue, string_issue


def _storable(value: str) -> str:
    """Pydantic AfterValidator: no lone surrogates (JSON "\\ud800"), which no store can encode."""
    why = string_issue(value)
    if why:
        raise ValueError(why)
    return value


def _override(value: dict[str, Any]) -> dict[str, Any]:
    """A sweep override the store can keep: at most MAX_JSON_DEPTH levels and MAX_JSON_ITEMS
    entries, no NUL / lone surrogates / non-finite numbers / integers beyond 64 bits."""
    why = json_shape_issue(value)
    if why:
        raise ValueError(why)
    issues = json_safety_issues(value)
    if issues:
        raise ValueError("; ".join(f"{path}: {msg}" for path, msg in issues[:5]))
    return value


Override = Annotated[dict[str, Any], AfterValidator(_override)]

RunStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
# No control characters (C0, DEL, C1) nor bidi overrides in short labels (trainer.safetext);
# no NUL anywhere (PostgreSQL rejects it in text).
Tag = Annotated[str, StringConstraints(min_length=1, max_length=64), AfterValidator(no_control_chars), AfterValidator(_storable)]
Label = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(no_control_chars), AfterValidator(_storable)]
Notes = Annotated[str, StringConstraints(max_length=10_000, pattern=r"^[^\x00]*$"), AfterValidator(_storable)]
UserName = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(no_control_chars), AfterValidator(_storable)]
Role = Literal["admin", "member", "viewer"]


# The store keeps naive UTC; the API says so explicitly ("...Z").
UtcDatetime = Annotated[datetime, AfterValidator(lambda d: d if d.tzinfo else d.replace(tzinfo=UTC))]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ----------------------------------------------------------------------------- runs


class RunCreate(_In):
    """POST /api/runs. ``config`` omitted = all defaults (AERO on the tiny preset)."""

    config: RunConfig = Field(default_factory=RunConfig)
    name: Label | None = Field(None, description="Display name; default: config.name, else '<method>-seed<seed>'.")
    tags: list[Tag] = Field(default_factory=list, max_length=32)
    notes: Notes = ""


class RunUpdate(_In):
    """PATCH /api/runs/{id}: replace tags and/or notes."""

    tags: list[Tag] | None = Field(None, max_length=32)
    notes: Notes | None = None


class RunPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    method: str
    engine: str
    status: RunStatus
    queue: str
    progress: float = Field(description="current_step / total_steps, 0..1.")
    current_step: int
    total_steps: int
    error: str | None
    created_at: UtcDatetime
    started_at: UtcDatetime | None
    finished_at: UtcDatetime | None
    worker: str | None
    heartbeat_at: UtcDatetime | None
    tags: list[str]
    notes: str
    sweep_id: int | None
    cancel_requested: bool
    attempts: int
    owner: str | None = Field(None, description="The submitting user; null for runs stored before users existed.")
    config: dict[str, Any]
    stop_reason: str | None = Field(None, description="The alert rule that stopped the run early (trainer/alerts.py), "
                                    "if one did.")


class RunsPublic(BaseModel):
    data: list[RunPublic]
    count: int = Field(description="Runs matching the filters, before limit/offset.")
    limit: int
    offset: int


# ----------------------------------------------------------------------------- sweeps


class SweepCreate(_In):
    """POST /api/sweeps: one run per (override, method, seed)."""

    name: Label = "sweep"
    base: SharedConfig = Field(default_factory=SharedConfig, description="Config every run starts from; each run "
                               "keeps the method sections (aero, dapo, ...) its method reads.")
    methods: list[Method] = Field(min_length=1, max_length=8)
    seeds: list[Annotated[int, Field(ge=0, le=2**31 - 1)]] | None = Field(
        None, min_length=1, max_length=64, description="Default: [base.seed]."
    )
    overrides: list[Override] = Field(
        default_factory=lambda: [{}],
        min_length=1,
        max_length=64,
        description='Config changes, one grid row each: dotted keys ({"aero.n_explore": 4}) or nested dicts '
        '(each at most 8 levels deep and 256 keys and list items).',
    )
    tags: list[Tag] = Field(default_factory=list, max_length=32)


class SweepSummary(BaseModel):
    id: int
    name: str
    created_at: UtcDatetime
    owner: str | None = Field(None, description="The submitting user; null for sweeps stored before users existed.")
    spec: dict[str, Any]
    status_counts: dict[str, int]
    run_count: int


class SweepPublic(SweepSummary):
    runs: list[RunPublic]


class SweepsPublic(BaseModel):
    data: list[SweepSummary]
    count: int = Field(description="All sweeps, before limit/offset.")
    limit: int
    offset: int


# ----------------------------------------------------------------------------- metrics & evals


class MetricsPublic(BaseModel):
    """Columnar: ``series[key][i]`` is ``key`` at ``steps[i]`` (null when that step lacks it)."""

    run_id: int
    steps: list[int]
    series: dict[str, list[float | None]]
    stored_steps: int = Field(description="Steps stored in the requested range, before downsampling.")
    last_step: int | None = Field(description="Last stored step of the run (any range).")
    run_status: RunStatus


class EvalPublic(BaseModel):
    run_id: int
    step: int
    benchmark: str
    n: int | None = Field(description="Samples per problem.")
    k: int
    avg_at_k: float | None
    pass_at_k: float | None
    avg_ci: list[float | None]
    pass_ci: list[float | None]
    per_problem: list[list[int]] | None = Field(description="[[n, c], ...] per problem (omitted with per_problem=false).")


class EvalsPublic(BaseModel):
    data: list[EvalPublic]
    count: int


# ----------------------------------------------------------------------------- compare


class RunStatsPublic(BaseModel):
    run_id: int
    name: str
    method: str
    status: str
    sweep_id: int | None
    seed: int | None
    steps: int
    mean: dict[str, float | None] = Field(description="Per-step means (time, FLOPs, rollouts, tokens, ratios).")
    total: dict[str, float | None] = Field(description="Sums over steps of the additive metrics.")
    savings_mean: dict[str, float | None]
    evals: dict[str, dict[str, Any]] = Field(description="Last evaluation per benchmark.")
    ratios: dict[str, Any] = Field(description="Each number divided by the baseline run's (null if undefined).")


class WaterfallPublic(BaseModel):
    source: Literal["counterfactual", "measured"]
    label: str
    run_id: int | None = None
    method: str | None = None
    sweep_id: int | None = None
    runs_per_method: dict[str, int] | None = None
    per_step: dict[str, dict[str, float | None]] | None = Field(
        description="unit -> {baseline, s1, s2, s3, final} with baseline - s1 - s2 - s3 = final."
    )


class WaterfallsPublic(BaseModel):
    counterfactual: list[WaterfallPublic]
    measured: list[WaterfallPublic]


class ReachTargetPublic(BaseModel):
    fraction: float = Field(description="Fraction of the baseline's gain over the base: 0.5, 0.75, 0.9 or 1.0.")
    accuracy: float = Field(description="The target: base + fraction x (final - base).")


class ReachCostRatioPublic(BaseModel):
    flops: float | None = Field(description="This run's FLOPs to reach the target / the baseline's (null: either did not reach).")
    seconds: float | None = Field(description="The same for training seconds.")
    rollouts: float | None = Field(None, description="The same for rollouts generated.")
    tokens: float | None = Field(None, description="The same for response tokens generated.")


class ReachResultPublic(BaseModel):
    """One run at one target."""

    fraction: float
    accuracy: float = Field(description="The target accuracy.")
    reached: bool = Field(description="False: the run's smoothed accuracy never reached the target ('not reached').")
    step: int | None = Field(description="First eval step whose smoothed accuracy >= the target (null: not reached).")
    flops: float | None = Field(description="Cumulative training FLOPs (running sum of flops/total) at that step.")
    seconds: float | None = Field(description="Cumulative training seconds (time/elapsed_s, evaluation excluded) at that step.")
    rollouts: float | None = Field(None, description="Cumulative rollouts generated (running sum of rollout/generated) "
                                   "at that step: the rollouts-to-target view.")
    tokens: float | None = Field(None, description="Cumulative response tokens generated (tokens/generated) at that step.")
    ratio: ReachCostRatioPublic = Field(description="Ratio to the baseline run at equal accuracy.")


class ReachRunPublic(BaseModel):
    run_id: int
    base: float | None = Field(description="This run's own step-0 evaluation (null when it has none).")
    evals: int = Field(description="Evaluations of the benchmark this run has stored.")
    targets: list[ReachResultPublic] = Field(description="One per target; empty when the block has a reason.")


class CompareReachPublic(BaseModel):
    """Compute to reach fractions of the baseline run's accuracy gain (docs/comparisons.md)."""

    metric: Literal["avg_at_k"]
    benchmark: str = Field(description="'overall': every benchmark's problems pooled.")
    window: int = Field(description="Curves are smoothed by a trailing mean over this many evals; final = mean of the last this many.")
    fractions: list[float]
    baseline_run_id: int
    base: float | None = Field(description="The baseline run's step-0 evaluation (before any update).")
    final: float | None = Field(description="Mean of the baseline run's last `window` evaluations.")
    gain: float | None = Field(description="final - base.")
    targets: list[ReachTargetPublic]
    reason: str | None = Field(description="Why there are no targets (no step-0 evaluation, no gain); null when there are.")
    runs: list[ReachRunPublic]


class ComparePublic(BaseModel):
    baseline: int
    runs: list[RunStatsPublic]
    waterfall: WaterfallsPublic
    reach: CompareReachPublic = Field(description="Compute (FLOPs, training seconds, rollouts and tokens generated) to reach the "
                                     "baseline's accuracy.")


# ----------------------------------------------------------------------------- misc


class HealthPublic(BaseModel):
    status: Literal["ok"]
    database: str
    broker: str


class Message(BaseModel):
    detail: str


# ----------------------------------------------------------------------------- seed groups


class StatPublic(BaseModel):
    """A number across a group's seeds: mean and Student-t CI (lo/hi null with fewer than 2 seeds)."""

    mean: float | None
    lo: float | None
    hi: float | None
    n: int = Field(description="Seeds with a value.")
    values: list[float] = Field(description="The per-seed values, in run order.")


class RatioPairPublic(BaseModel):
    seed: int | None
    run_id: int
    baseline_run_id: int
    ratio: float | None = Field(description="This run's value / its seed partner's in the baseline group.")


class RatioStatPublic(BaseModel):
    """Ratio to the baseline group, one per seed pair: geometric mean and a Student-t interval
    on log ratios (``scale`` "log"), or the arithmetic mean_ci when a ratio is <= 0 ("linear")."""

    mean: float | None
    lo: float | None
    hi: float | None
    n: int = Field(description="Seed pairs with a defined ratio.")
    values: list[float]
    scale: Literal["log", "linear"]
    pairs: list[RatioPairPublic]


class GroupEvalPublic(BaseModel):
    k: int | None = Field(description="The common k: the smallest eval k among the compared runs.")
    n: int = Field(description="Samples per problem.")
    problems: int
    steps: list[int] = Field(description="The step of each run's evaluation (a running seed may lag).")
    avg_at_k: StatPublic
    pass_at_k: StatPublic


class GroupRatiosPublic(BaseModel):
    mean: dict[str, RatioStatPublic]
    total: dict[str, RatioStatPublic]
    evals: dict[str, dict[str, RatioStatPublic]]


class GroupPublic(BaseModel):
    key: str = Field(description="Hash of the config without seed and name.")
    label: str = Field(description="Method, plus the config fields that set the group apart from its method's other groups.")
    method: str
    run_ids: list[int]
    seeds: list[int | None]
    steps: StatPublic
    mean: dict[str, StatPublic] = Field(description="Per-step means (as /compare), across seeds.")
    total: dict[str, StatPublic] = Field(description="Per-run totals of the additive metrics, across seeds.")
    evals: dict[str, GroupEvalPublic] = Field(description="Last evaluation per benchmark ('overall' pools them).")
    ratios: GroupRatiosPublic


class SignificancePublic(BaseModel):
    group: str
    baseline: str
    metric: Literal["avg_at_k", "pass_at_k"]
    k: int
    diff: float = Field(description="Group minus baseline: mean over problems of the seed-averaged per-problem scores.")
    ci: list[float] = Field(description="1-alpha two-level bootstrap CI of diff (problems and seeds resampled).")
    p_value: float = Field(description="Two-sided paired sign-flip permutation test over problems.")
    problems: int
    seeds: list[int] = Field(description="Runs averaged on each side [group, baseline].")
    test: str


class ReachTargetStatPublic(BaseModel):
    fraction: float
    accuracy: StatPublic


class ReachCostRatioStatPublic(BaseModel):
    flops: RatioStatPublic
    seconds: RatioStatPublic
    rollouts: RatioStatPublic | None = None
    tokens: RatioStatPublic | None = None


class ReachSeedPublic(BaseModel):
    """One seed pair's result at one target."""

    seed: int | None
    run_id: int
    baseline_run_id: int
    reached: bool
    step: int | None
    flops: float | None
    seconds: float | None
    rollouts: float | None = None
    tokens: float | None = None


class GroupReachTargetPublic(BaseModel):
    fraction: float
    accuracy: StatPublic = Field(description="The target accuracy across the seed pairs (each seed's baseline sets its own).")
    reached: int = Field(description="Seed pairs whose group run reached the target.")
    of: int = Field(description="Seed pairs with a target ('not reached (of - reached / of seeds)').")
    step: StatPublic = Field(description="First eval step at the target, over the seeds that reached it.")
    flops: StatPublic = Field(description="Cumulative training FLOPs there, over the seeds that reached it.")
    seconds: StatPublic = Field(description="Cumulative training seconds there (evaluation excluded), over the seeds that reached it.")
    rollouts: StatPublic | None = Field(None, description="Cumulative rollouts generated there, over the seeds that reached it.")
    tokens: StatPublic | None = Field(None, description="Cumulative response tokens generated there, over the seeds that "
                                      "reached it.")
    ratio: ReachCostRatioStatPublic = Field(description="This group / the baseline group at equal accuracy, per seed pair.")
    seeds: list[ReachSeedPublic]


class ReachSkipPublic(BaseModel):
    seed: int | None
    run_id: int
    baseline_run_id: int
    reason: str


class GroupReachPublic(BaseModel):
    key: str
    label: str
    method: str
    pairs: int = Field(description="Runs paired by seed with the baseline group.")
    usable: int = Field(description="Pairs whose baseline run gives targets (a step-0 evaluation and a gain).")
    unpaired_run_ids: list[int] = Field(description="Runs without a baseline run of their seed (left out).")
    reason: str | None = Field(description="Why the group has no targets; null when it has.")
    skipped: list[ReachSkipPublic] = Field(description="Seed pairs left out, with why.")
    targets: list[GroupReachTargetPublic]


class GroupCompareReachPublic(BaseModel):
    """Compute to reach fractions of the baseline group's accuracy gain, paired by seed (docs/comparisons.md)."""

    metric: Literal["avg_at_k"]
    benchmark: str = Field(description="'overall': every benchmark's problems pooled.")
    window: int = Field(description="Curves are smoothed by a trailing mean over this many evals; final = mean of the last this many.")
    fractions: list[float]
    baseline: str = Field(description="Key of the baseline group.")
    base: StatPublic = Field(description="The baseline runs' step-0 evaluations, across seeds.")
    final: StatPublic = Field(description="Mean of each baseline run's last `window` evaluations, across seeds.")
    gain: StatPublic = Field(description="final - base, across seeds.")
    targets: list[ReachTargetStatPublic] = Field(description="Target accuracies across the baseline's seeds.")
    reason: str | None = Field(description="Why the baseline group gives no targets; null when it does.")
    groups: list[GroupReachPublic]


class GroupComparePublic(BaseModel):
    baseline: str = Field(description="Key of the baseline group.")
    alpha: float
    k: int | None
    groups: list[GroupPublic]
    significance: dict[str, list[SignificancePublic]] = Field(description="Per benchmark, one row per (group, metric).")
    reach: GroupCompareReachPublic = Field(description="Compute (FLOPs, training seconds, rollouts and tokens generated) to "
                                          "reach the baseline group's accuracy.")


class BandPublic(BaseModel):
    x: list[float]
    mean: list[float | None]
    lo: list[float | None]
    hi: list[float | None]
    n: list[int] = Field(description="Seeds covering each x.")


class GroupCurvesEntry(BaseModel):
    key: str
    label: str
    method: str
    run_ids: list[int]
    curves: dict[str, BandPublic] = Field(description=(
        "Per requested key. Step metrics: on a grid over the axis. Eval keys (eval/<benchmark>/<metric>): at the x of the "
        "runs' eval steps (evenly spaced when there are more than `points` of them)."))


class GroupCurvesPublic(BaseModel):
    x: Literal["step", "flops", "time"]
    alpha: float
    smooth: int = Field(description="Evaluations averaged per point of eval keys (trailing mean, per run).")
    groups: list[GroupCurvesEntry]


class MethodStrategiesPublic(BaseModel):
    s1: bool = Field(description="S1: rescue zero-accuracy prompts with more rollouts.")
    s2: bool = Field(description="S2: Bayesian baseline for zero-variance groups.")
    s3: bool = Field(description="S3: rejection sampling of negatives in low-success groups.")


class MethodVerlPublic(BaseModel):
    rollout_n: Literal["n_total", "n_explore"]
    adv_estimator: str = Field(description="verl's advantage estimator in the stock fit.")
    stock_fit: bool = Field(description="True: verl's own fit loop (every rollout trained, verl's estimator); False: "
                            "the curated loop, trained on the method step's own advantages.")


class MethodSectionPublic(BaseModel):
    name: str = Field(description="The run-config block (``aero`` -> config.aero).")
    title: str = Field(description="Its heading on the Launch form.")
    form: list[list[str]] = Field(description="The Launch form's inputs: [dotted config path, label] pairs.")


class MethodPublic(BaseModel):
    """One training method's spec (trainer/methods/spec.py)."""

    name: str
    label: str
    colour: str = Field(description="Hex colour of the method on every chart.")
    description: str
    family: str
    order: int = Field(description="Position in lists and menus.")
    dash: int = Field(description="Where the method's curves start in the dashboard's dash cycle.")
    baseline: bool = Field(description="The method every other one is compared against (exactly one is).")
    sections: list[MethodSectionPublic] = Field(
        description="The run-config blocks the method reads; a run config of this method carries exactly these.")
    strategies: MethodStrategiesPublic
    loss_agg: str = Field(description="Default loss aggregation (RunConfig.loss_agg overrides it).")
    clip: Literal["symmetric", "clip-higher"] = Field(
        description="symmetric: (clip_eps, clip_eps); clip-higher: the method's own range (DAPO: dapo.eps_low, "
        "dapo.eps_high).")
    normalize_std: bool | None = Field(description="null: follow adv_estimator; false: never divide by the group std.")
    verl: MethodVerlPublic
    engines: list[str] = Field(description="The engines that can run the method.")
    needs_prompt_ids: bool = Field(description="True: the arithmetic task needs train_size (stable prompt ids).")


class MethodsPublic(BaseModel):
    methods: list[MethodPublic]


# ----------------------------------------------------------------------------- users, tokens, audit


class TokenCreate(_In):
    """POST /api/tokens (admins): a token for ``user`` (default: the user called ``name``, created if new)."""

    name: Label = Field(description="A label for the token (who or what uses it).")
    role: Role = Field("member", description="admin: everything; member: submit and change own runs; viewer: read only.")
    user: UserName | None = Field(None, description="The user the token belongs to; default: ``name``.")


class TokenPublic(BaseModel):
    id: int
    name: str
    user: str
    role: Role
    created_at: UtcDatetime
    last_used_at: UtcDatetime | None
    revoked_at: UtcDatetime | None


class TokenCreated(TokenPublic):
    token: str = Field(description="The token itself, shown only in this answer (the store keeps its hash).")


class TokensPublic(BaseModel):
    data: list[TokenPublic]
    count: int


class QuotaUsage(BaseModel):
    limits: dict[str, int] = Field(description="The operator's quotas by variable name (0 = no limit).")
    queued: int
    running: int


class MePublic(BaseModel):
    """GET /api/me: who the token belongs to and what it may do."""

    user: str
    role: Role
    token: str = Field(description="The token's name.")
    may_submit: bool
    may_change_others: bool
    quota: QuotaUsage


class AuditEventPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    at: UtcDatetime
    user: str | None = Field(description="Who made the change; null for the operator at the command line.")
    role: str | None
    action: str
    target: str | None = Field(description="What changed, as kind:id (run:12, sweep:3, token:5).")
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class AuditPublic(BaseModel):
    data: list[AuditEventPublic]
    count: int = Field(description="Events matching the filters, before limit/offset.")
    limit: int
    offset: int
# ----------------------------------------------------------------------------- step details: rollouts, histograms, keys


class RolloutPublic(BaseModel):
    """One stored rollout of a step (trainer/rollout_sample.py). ``prompt`` and ``response`` are
    model text: untrusted, clipped to the operator's AERO_ROLLOUT_TEXT_CHARS (``clipped``); a
    client renders them as text, never as markup."""

    group: int = Field(description="Prompt group within the step.")
    row: int = Field(description="Global row id within the step (generation order).")
    prompt: str
    response: str
    reward: float | None
    correct: bool
    advantage: float | None = Field(description="The advantage it was trained with; null when curated out.")
    stratum: str = Field(description="rescue, low or high (from the group's exploration).")
    round: int = Field(description="Generation round (0 = exploration / the first call).")
    stage: str = Field(description='"explore", "rescue r", "round r" or "curated out".')
    length: int = Field(description="Response tokens.")
    truncated: bool = Field(description="Cut at max_new_tokens (no EOS).")
    clipped: bool = Field(description="The stored text was clipped to the operator's cap.")


class RolloutsPublic(BaseModel):
    run_id: int
    step: int
    data: list[RolloutPublic]
    count: int = Field(description="Rollouts matching the filters in all (the page is data).")
    offset: int
    limit: int
    steps: list[int] = Field(description="Every step with a stored sample, ascending.")


class HistogramPublic(BaseModel):
    """Fixed-bin counts per step: ``counts[i][b]`` is bin b at ``steps[i]``; bins are equal widths over [lo, hi]."""

    lo: float
    hi: float
    bins: int
    counts: list[list[int]]


class HistogramsPublic(BaseModel):
    run_id: int
    steps: list[int]
    histograms: dict[str, HistogramPublic] = Field(description="pass_rate (per prompt) and length (per rollout).")


class MetricKeysPublic(BaseModel):
    run_id: int
    keys: list[str] = Field(description="Every metric key the run logged, sorted.")
# ----------------------------------------------------------------------------- alerts


class AlertEventPublic(BaseModel):
    """An alert rule of the run that fired (trainer/alerts.py)."""

    model_config = ConfigDict(from_attributes=True)

    rule: int = Field(description="Index of the rule in config.alerts.rules.")
    kind: str
    step: int = Field(description="The step (or evaluation step) it fired at.")
    value: float | None = Field(description="The value that tripped it, when it has one.")
    message: str
    stopped: bool = Field(description="The rule stopped the run.")
    delivery: str = Field(description="What became of the webhook post: 'posted: HTTP 200', 'failed: ...', "
                          "'refused: ...', 'recorded (no webhook_url)', or '' for a stop-only rule.")
    created_at: UtcDatetime


class AlertsPublic(BaseModel):
    rules: list[dict[str, Any]] = Field(description="The run's rules (config.alerts.rules).")
    webhook: bool = Field(description="Whether the run posts its alerts to a webhook (the URL is not shown).")
    events: list[AlertEventPublic] = Field(description="Fired rules, oldest first.")
    stop_reason: str | None = Field(description="The rule that stopped the run early, if one did.")
