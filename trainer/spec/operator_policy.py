"""The operator's run policy: what guards the host, whoever submits the run.

A run config is untrusted input (any API token holder writes one). What protects the machine
that trains it is set by the operator, in the environment of the API and of each worker:
the code sandbox's isolation mode, interpreter and uid, and caps on every resource a run
config can ask for. A run config may tighten a cap (ask for less), never loosen it: asking for
more is a :class:`~trainer.spec.config.ConfigError` naming the field and the operator's setting.
Paths a run reads (``model_path``, ``train_data``, ``benchmarks``) must resolve under the
operator's data roots.

pydantic and the stdlib only (the backend imports this module). docs/deploy.md "Run policy"
lists every setting; the backend reads them through ``backend.settings.Settings.run_policy``,
the CLI (``aero train`` / ``aero bench``, the operator themselves) through
:meth:`RunPolicy.from_env`.
"""

from __future__ import annotations

import glob
import math
import os
from collections.abc import Mapping
from fnmatch import fnmatch
from pathlib import Path
import typing
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from trainer.spec.alerts import webhook_policy_issues
from trainer.spec.config import RunConfig
from trainer.spec.config_types import Cap
from trainer.models.catalog import MODELS, installed, not_installed_message
from trainer.spec.resources import gpus_held, resolve_gpus

class _Settings(BaseModel):
    """Operator settings (env names in :data:`ENV`). ``data_roots=None``: paths unrestricted
    (the CLI, run by the operator, when ``AERO_DATA_ROOTS`` is unset); the platform always
    passes roots (default: its data directory). :data:`RunPolicy` adds one field per cap."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sandbox_isolation: Literal["auto", "namespace", "audit"] = Field(
        "auto", description="'namespace': network + PID namespaces required (a code run fails before compute "
        "without them); 'auto': namespaces, falling back to the audit hook ONLY where namespaces are unavailable "
        "on this host; 'audit': never namespaces (the audit hook alone, not a security boundary).")
    sandbox_audit_hook: Literal["always", "fallback"] = Field(
        "always", description="Audit hook in every sandbox ('always'), or only when namespaces are unavailable.")
    sandbox_python: str | None = Field(None, description="Interpreter for candidate code; unset: the worker's if "
                                       "the sandbox user can run it, else the system python3.")
    sandbox_uid: int = Field(2_000_000_000, ge=1, le=4_000_000_000, description="First uid/gid of the range a root "
                             "worker's sandboxes drop to (one uid per candidate scored at once; every process of that "
                             "uid is killed after each candidate, so the range must belong to nothing else).")
    sandbox_uid_count: int = Field(64, ge=1, le=65536, description="Size of the sandbox uid range: candidates scored "
                                   "at once on this host (across worker processes); more wait for a free uid.")
    max_gpus: int = Field(8, ge=0, description="Cap on the GPUs one run holds (resources.gpus_per_node x "
                          "resources.nodes; a logical GPU on device=cpu counts too).")
    verl_gpus: int = Field(1, ge=1, le=1024, description="GPUs per node of a verl run whose config leaves "
                           "resources.gpus_per_node unset; written into the run's config when it is parsed with this "
                           "policy (at submit), so every later reader sees the same count.")
    rollout_sample_prompts: int = Field(4, ge=0, le=4096, description="Rollouts stored per step: this many random "
                                        "prompt groups with all their rollouts, plus every rescued group (0: none).")
    rollout_sample_max_rows: int = Field(256, ge=0, le=65536, description="Cap on the rollouts stored per step "
                                         "(whole groups only).")
    rollout_text_chars: int = Field(2000, ge=16, le=1_000_000, description="Each stored prompt and response is "
                                    "clipped to this many characters.")
    data_roots: tuple[Path, ...] | None = Field(None, description="Directories model_path, train_data and "
                                                "benchmarks must resolve under (symlinks followed).")
    denied: tuple[str, ...] = Field((), description="fnmatch patterns of resolved paths refused even under a root "
                                    "(the platform's own files: admin token, store, broker, logs).")
    webhook_hosts: tuple[str, ...] = Field((), description="Hosts (``host`` or ``host:port``) a run's alert webhook "
                                           "may post to; none by default, so every webhook is refused until listed.")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides) -> Any:
        """The policy from ``AERO_*`` variables (:data:`ENV`); unset ones keep their defaults."""
        env = os.environ if environ is None else environ
        values = {field: env[var] for field, var in ENV.items() if env.get(var, "").strip()}
        if "data_roots" in values:
            values["data_roots"] = parse_roots(values["data_roots"])
        if "webhook_hosts" in values:
            values["webhook_hosts"] = tuple(h.strip() for h in values["webhook_hosts"].split(",") if h.strip())
        return cls.model_validate({**values, **overrides})

    def resolve(self, cfg: RunConfig) -> RunConfig:
        """``cfg`` with its GPU count worked out under this policy (trainer/spec/resources.py
        :func:`resolve_gpus`); ``parse_run_config(data, policy)`` calls it before any rule."""
        return resolve_gpus(cfg, self.verl_gpus)

    def issues(self, cfg: RunConfig) -> list[tuple[str, str]]:
        """:func:`policy_issues` of ``cfg`` under this policy (``parse_run_config(data, policy)``
        calls it, so the config module needs no import of this one)."""
        return policy_issues(cfg, self)

    def resolved_roots(self) -> tuple[Path, ...] | None:
        return None if self.data_roots is None else tuple(Path(r).expanduser().resolve() for r in self.data_roots)


def declared_caps() -> tuple[tuple[str, Cap], ...]:
    """(dotted config field, cap) for every field of the run config that declares a
    :class:`~trainer.spec.config_types.Cap` (top-level fields, blocks, and every method's and task's
    section), in the config's field order: the one place caps are declared."""
    out = []
    for name, info in RunConfig.model_fields.items():
        out += [(name, m) for m in info.metadata if isinstance(m, Cap)]
        for model in _models_in(info.annotation):
            out += [(f"{name}.{sub}", m) for sub, sinfo in model.model_fields.items()
                    for m in sinfo.metadata if isinstance(m, Cap)]
    return tuple(out)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field holds (``Model`` or ``Model | None``)."""
    args = typing.get_args(annotation) or (annotation,)
    return [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]


def _cap_field(cap: Cap) -> tuple[Any, Any]:
    kind = type(cap.limit)
    extra = {"allow_inf_nan": False} if kind is float else {}
    return kind, Field(cap.limit, ge=cap.ge, gt=cap.gt, description=cap.description, **extra)


CAP_DECLARATIONS = declared_caps()
# (dotted config field, policy field): the config's value must be <= the policy's
CAPS: tuple[tuple[str, str], ...] = tuple((field, cap.policy) for field, cap in CAP_DECLARATIONS)
if TYPE_CHECKING:
    class RunPolicy(_Settings):
        def __getattr__(self, name: str) -> Any: ...  # the cap fields, built below
else:
    RunPolicy = create_model("RunPolicy", __base__=_Settings, __module__=__name__,
                             __doc__=_Settings.__doc__.replace(":data:`RunPolicy` adds", "With"),
                             **{cap.policy: _cap_field(cap) for _, cap in CAP_DECLARATIONS})

# field -> environment variable (the backend's Settings reads the same names)
ENV: dict[str, str] = {
    "sandbox_isolation": "AERO_SANDBOX_ISOLATION",
    "sandbox_audit_hook": "AERO_SANDBOX_AUDIT_HOOK",
    "sandbox_python": "AERO_SANDBOX_PYTHON",
    "sandbox_uid": "AERO_SANDBOX_UID",
    "sandbox_uid_count": "AERO_SANDBOX_UID_COUNT",
    "max_gpus": "AERO_MAX_GPUS",
    "verl_gpus": "AERO_VERL_GPUS",
    "rollout_sample_prompts": "AERO_ROLLOUT_SAMPLE_PROMPTS",
    "rollout_sample_max_rows": "AERO_ROLLOUT_SAMPLE_MAX_ROWS",
    "rollout_text_chars": "AERO_ROLLOUT_TEXT_CHARS",
    "data_roots": "AERO_DATA_ROOTS",
    "webhook_hosts": "AERO_WEBHOOK_HOSTS",
    **{cap.policy: cap.env for _, cap in CAP_DECLARATIONS},
}

OUTSIDE_ROOTS = "must be a path under the operator's data roots (AERO_DATA_ROOTS)"


def platform_denied(data_dir: Path) -> tuple[str, ...]:
    """The platform's own files in its data directory, never readable as model or data: the
    admin token, the SQLite store and broker (with their journals), the logs."""
    d = glob.escape(str(Path(data_dir).expanduser().resolve()))
    return (f"{d}/admin.token*", f"{d}/*.sqlite*", f"{d}/logs", f"{d}/logs/*")


def parse_roots(value: str | os.PathLike | tuple | list) -> tuple[Path, ...]:
    """``AERO_DATA_ROOTS``: directories separated by ``os.pathsep``."""
    if isinstance(value, (tuple, list)):
        return tuple(Path(v) for v in value)
    return tuple(Path(p) for p in str(value).split(os.pathsep) if p.strip())


def _get(cfg: RunConfig, dotted: str):
    """The value at ``dotted``; None inside a method section the config does not carry."""
    obj = cfg
    for part in dotted.split("."):
        obj = getattr(obj, part) if obj is not None else None
    return obj


def under_roots(path: str, roots: tuple[Path, ...], denied: tuple[str, ...] = ()) -> bool:
    """Whether ``path`` (``~`` expanded, symlinks followed, ``..`` collapsed) lies under a root
    and matches no ``denied`` pattern. Says nothing about whether it exists."""
    try:
        real = Path(path).expanduser().resolve(strict=False)
    except (OSError, RuntimeError, ValueError):  # symlink loop, bad characters
        return False
    return any(real == r or real.is_relative_to(r) for r in roots) and not any(fnmatch(str(real), d) for d in denied)


def policy_issues(cfg: RunConfig, policy: RunPolicy) -> list[tuple[str, str]]:
    """(dotted field, message) for every value of ``cfg`` the operator's policy refuses."""
    issues = []
    for field, cap in CAPS:
        value, limit = _get(cfg, field), getattr(policy, cap)
        if value is None:
            continue  # another method's section: not in this config
        if field == "code.workers" and value == 0:
            continue  # 0 = min(8, CPUs), bounded below by the cap's own minimum
        if isinstance(value, float) and not math.isfinite(value):
            issues.append((field, "must be a finite number"))
        elif value > limit:
            shown = int(limit) if isinstance(limit, float) and limit.is_integer() else limit
            issues.append((field, f"at most {shown} (operator cap {ENV[cap]})"))
    gpus = gpus_held(cfg, cuda=cfg.device == "cuda")
    if gpus > policy.max_gpus:
        issues.append(("resources.gpus_per_node", f"the run would hold {gpus} GPUs (gpus_per_node x nodes); at most "
                       f"{policy.max_gpus} (operator cap AERO_MAX_GPUS)"))
    code = getattr(cfg, "code", None)  # the code task's section (trainer/tasks/code_config.py)
    if code is not None and code.audit_hook == "fallback" and policy.sandbox_audit_hook == "always":
        issues.append(("code.audit_hook", "the operator requires the audit hook always (AERO_SANDBOX_AUDIT_HOOK)"))
    if cfg.preset in MODELS and installed(cfg.preset) is None:  # an installed model's preset, on this host
        issues.append(("preset", not_installed_message(cfg.preset)))
    issues += webhook_policy_issues(cfg.alerts, policy.webhook_hosts)
    roots = policy.resolved_roots()
    if roots is not None:
        paths = [("model_path", cfg.model_path), ("train_data", cfg.train_data)]
        paths += [(f"benchmarks.{name}", p) for name, p in cfg.benchmarks.items()]
        issues += [(field, OUTSIDE_ROOTS) for field, p in paths if p is not None and not under_roots(p, roots, policy.denied)]
    return issues
