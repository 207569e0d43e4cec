"""Request and response bodies (full-stack-fastapi-template's ladder: XCreate / XUpdate /
XPublic / XsPublic), one module per feature; this package re-exports them all, so callers
import ``from backend.schemas import X``. Run configs are trainer.spec.config.RunConfig, so the
OpenAPI schema documents every hyperparameter with its paper default.

- ``base``: the shared field types (Tag, Label, Notes, Priority, UserName, Role, RunStatus, RunState,
  UtcDatetime, Override) and ``InputModel``, the base of every request body (unknown fields are a 422);
  ``ConfigBody``, that of the bodies carrying run configs (it notes renamed config fields).
- ``runs``, ``sweeps``: submitting, changing and listing runs and sweeps.
- ``metrics``: a run's step metrics and evaluations.
- ``rollouts``: a run's step details (rollout samples, histograms, metric keys).
- ``alerts``: a run's alert rules and fired events.
- ``compare``: runs against a baseline run (stats, waterfalls, compute to reach its accuracy).
- ``seed_stats``, ``groups``, ``group_reach``, ``curves``: seed groups against a baseline group.
- ``methods``: the training methods' specs.
- ``access``: tokens, the caller's identity and quota, the audit log.
- ``system``: health and plain messages.
"""

from backend.schemas.access import (
    AuditEventPublic,
    AuditPublic,
    MePublic,
    QuotaUsage,
    TokenCreate,
    TokenCreated,
    TokenPublic,
    TokensPublic,
)
from backend.schemas.alerts import AlertEventPublic, AlertsPublic
from backend.schemas.base import (
    InputModel,
    Label,
    Notes,
    Override,
    Priority,
    Role,
    RunState,
    RunStatus,
    Tag,
    UserName,
    UtcDatetime,
)
from backend.schemas.compare import (
    ComparePublic,
    CompareReachPublic,
    ReachCostRatioPublic,
    ReachResultPublic,
    ReachRunPublic,
    ReachTargetPublic,
    RunStatsPublic,
    WaterfallPublic,
    WaterfallsPublic,
)
from backend.schemas.curves import BandPublic, GroupCurvesEntry, GroupCurvesPublic
from backend.schemas.group_reach import (
    GroupCompareReachPublic,
    GroupReachPublic,
    GroupReachTargetPublic,
    ReachCostRatioStatPublic,
    ReachSeedPublic,
    ReachSkipPublic,
    ReachTargetStatPublic,
)
from backend.schemas.groups import (
    GroupComparePublic,
    GroupEvalPublic,
    GroupPublic,
    GroupRatiosPublic,
    SignificancePublic,
)
from backend.schemas.methods import (
    MethodPublic,
    MethodSectionPublic,
    MethodsPublic,
    MethodStrategiesPublic,
    MethodVerlPublic,
)
from backend.schemas.metrics import EvalPublic, EvalsPublic, MetricsPublic
from backend.schemas.rollouts import (
    HistogramPublic,
    HistogramsPublic,
    MetricKeysPublic,
    RolloutPublic,
    RolloutsPublic,
)
from backend.schemas.runs import RunCreate, RunPublic, RunsPublic, RunUpdate
from backend.schemas.seed_stats import RatioPairPublic, RatioStatPublic, StatPublic
from backend.schemas.sweeps import SweepCreate, SweepPublic, SweepsPublic, SweepSummary
from backend.schemas.system import HealthPublic, Message

__all__ = [
    # base
    "InputModel", "Label", "Notes", "Override", "Priority", "Role", "RunState", "RunStatus", "Tag", "UserName", "UtcDatetime",
    # runs, sweeps
    "RunCreate", "RunUpdate", "RunPublic", "RunsPublic",
    "SweepCreate", "SweepSummary", "SweepPublic", "SweepsPublic",
    # a run's data
    "MetricsPublic", "EvalPublic", "EvalsPublic",
    "RolloutPublic", "RolloutsPublic", "HistogramPublic", "HistogramsPublic", "MetricKeysPublic",
    "AlertEventPublic", "AlertsPublic",
    # compare runs
    "RunStatsPublic", "WaterfallPublic", "WaterfallsPublic", "ReachTargetPublic", "ReachCostRatioPublic",
    "ReachResultPublic", "ReachRunPublic", "CompareReachPublic", "ComparePublic",
    # compare seed groups
    "StatPublic", "RatioPairPublic", "RatioStatPublic",
    "GroupEvalPublic", "GroupRatiosPublic", "GroupPublic", "SignificancePublic", "GroupComparePublic",
    "ReachTargetStatPublic", "ReachCostRatioStatPublic", "ReachSeedPublic", "GroupReachTargetPublic",
    "ReachSkipPublic", "GroupReachPublic", "GroupCompareReachPublic",
    "BandPublic", "GroupCurvesEntry", "GroupCurvesPublic",
    # methods
    "MethodStrategiesPublic", "MethodVerlPublic", "MethodSectionPublic", "MethodPublic", "MethodsPublic",
    # access
    "TokenCreate", "TokenPublic", "TokenCreated", "TokensPublic", "QuotaUsage", "MePublic",
    "AuditEventPublic", "AuditPublic",
    # system
    "HealthPublic", "Message",
]
