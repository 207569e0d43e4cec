"""The operator's run policy: what guards the host, whoever submits the run.

A run config is untrusted input (any API token holder writes one). What protects the machine
that trains it is set by the operator, in the environment of the API and of each worker:
the code sandbox's isolation mode, interpreter and uid, and caps on every resource a run
config can ask for. A run config may tighten a cap (ask for less), never loosen it: asking for
more is a :class:`~trainer.config.ConfigError` naming the field and the operator's setting.
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
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainer.alerts import webhook_policy_issues
from trainer.resources import gpus_held

if TYPE_CHECKING:
    from trainer.config import RunConfig


class RunPolicy(BaseModel):
    """Operator settings (env names in :data:`ENV`). ``data_roots=None``: paths unrestricted
    (the CLI, run by the operator, when ``AERO_DATA_ROOTS`` is unset); the platform always
    passes roots (default: its data directory)."""

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
    sandbox_memory_mb: int = Field(4096, ge=64, description="Cap on code.memory_mb (RLIMIT_AS per process, MiB).")
    sandbox_max_processes: int = Field(256, ge=2, description="Cap on code.max_processes (RLIMIT_NPROC).")
    sandbox_max_output_bytes: int = Field(16 << 20, ge=1024, description="Cap on code.max_output_bytes.")
    sandbox_test_timeout_s: float = Field(60.0, gt=0, description="Cap on code.test_timeout_s.")
    sandbox_timeout_s: float = Field(600.0, gt=0, description="Cap on code.timeout_s.")
    sandbox_workers: int = Field(64, ge=1, description="Cap on code.workers (sandboxes at once; 0 = min(8, CPUs) "
                                 "is always allowed).")
    max_steps: int = Field(100_000, ge=1, description="Cap on steps.")
    max_batch_prompts: int = Field(4096, ge=1, description="Cap on batch_prompts.")
    max_n_total: int = Field(512, ge=2, description="Cap on n_total.")
    max_new_tokens: int = Field(32_768, ge=1, description="Cap on max_new_tokens.")
    max_prompt_tokens: int = Field(32_768, ge=1, description="Cap on max_prompt_tokens.")
    max_eval_problems: int = Field(100_000, ge=1, description="Cap on eval_problems.")
    max_eval_n: int = Field(1024, ge=1, description="Cap on eval_n.")
    max_aero_n_max: int = Field(1024, ge=1, description="Cap on aero.n_max.")
    max_aero_k_max: int = Field(100, ge=0, description="Cap on aero.k_max.")
    max_aero_k: float = Field(1000.0, ge=1, allow_inf_nan=False, description="Cap on aero.k (always finite).")
    max_aero_delta_n: int = Field(1024, ge=1, description="Cap on aero.delta_n (rescue rollouts per prompt per round).")
    max_gpus: int = Field(8, ge=0, description="Cap on the GPUs one run holds (resources.gpus_per_node x "
                          "resources.nodes; a logical GPU on device=cpu counts too).")
    max_nodes: int = Field(1, ge=1, description="Cap on resources.nodes: a run over several nodes needs the operator's "
                           "Ray cluster (AERO_RAY_ADDRESS) and a run directory every node sees, so it is opt-in.")
    max_dapo_gen_rounds: int = Field(64, ge=1, description="Cap on dapo.max_gen_rounds (prompt batches generated "
                                     "per step: each one costs a GRPO step's generation).")
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
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides) -> RunPolicy:
        """The policy from ``AERO_*`` variables (:data:`ENV`); unset ones keep their defaults."""
        env = os.environ if environ is None else environ
        values = {field: env[var] for field, var in ENV.items() if env.get(var, "").strip()}
        if "data_roots" in values:
            values["data_roots"] = parse_roots(values["data_roots"])
        if "webhook_hosts" in values:
            values["webhook_hosts"] = tuple(h.strip() for h in values["webhook_hosts"].split(",") if h.strip())
        return cls.model_validate({**values, **overrides})

    def resolved_roots(self) -> tuple[Path, ...] | None:
        return None if self.data_roots is None else tuple(Path(r).expanduser().resolve() for r in self.data_roots)


# field -> environment variable (the backend's Settings reads the same names)
ENV: dict[str, str] = {
    "sandbox_isolation": "AERO_SANDBOX_ISOLATION",
    "sandbox_audit_hook": "AERO_SANDBOX_AUDIT_HOOK",
    "sandbox_python": "AERO_SANDBOX_PYTHON",
    "sandbox_uid": "AERO_SANDBOX_UID",
    "sandbox_uid_count": "AERO_SANDBOX_UID_COUNT",
    "sandbox_memory_mb": "AERO_SANDBOX_MAX_MEMORY_MB",
    "sandbox_max_processes": "AERO_SANDBOX_MAX_PROCESSES",
    "sandbox_max_output_bytes": "AERO_SANDBOX_MAX_OUTPUT_BYTES",
    "sandbox_test_timeout_s": "AERO_SANDBOX_MAX_TEST_TIMEOUT_S",
    "sandbox_timeout_s": "AERO_SANDBOX_MAX_TIMEOUT_S",
    "sandbox_workers": "AERO_SANDBOX_MAX_WORKERS",
    "max_steps": "AERO_MAX_STEPS",
    "max_batch_prompts": "AERO_MAX_BATCH_PROMPTS",
    "max_n_total": "AERO_MAX_N_TOTAL",
    "max_new_tokens": "AERO_MAX_NEW_TOKENS",
    "max_prompt_tokens": "AERO_MAX_PROMPT_TOKENS",
    "max_eval_problems": "AERO_MAX_EVAL_PROBLEMS",
    "max_eval_n": "AERO_MAX_EVAL_N",
    "max_aero_n_max": "AERO_MAX_AERO_N_MAX",
    "max_aero_k_max": "AERO_MAX_AERO_K_MAX",
    "max_aero_k": "AERO_MAX_AERO_K",
    "max_aero_delta_n": "AERO_MAX_AERO_DELTA_N",
    "max_dapo_gen_rounds": "AERO_MAX_DAPO_GEN_ROUNDS",
    "max_gpus": "AERO_MAX_GPUS",
    "max_nodes": "AERO_MAX_NODES",
    "rollout_sample_prompts": "AERO_ROLLOUT_SAMPLE_PROMPTS",
    "rollout_sample_max_rows": "AERO_ROLLOUT_SAMPLE_MAX_ROWS",
    "rollout_text_chars": "AERO_ROLLOUT_TEXT_CHARS",
    "data_roots": "AERO_DATA_ROOTS",
    "webhook_hosts": "AERO_WEBHOOK_HOSTS",
}

# (dotted config field, policy field): the config's value must be <= the policy's
CAPS: tuple[tuple[str, str], ...] = (
    ("steps", "max_steps"),
    ("batch_prompts", "max_batch_prompts"),
    ("n_total", "max_n_total"),
    ("max_new_tokens", "max_new_tokens"),
    ("max_prompt_tokens", "max_prompt_tokens"),
    ("eval_problems", "max_eval_problems"),
    ("eval_n", "max_eval_n"),
    ("aero.n_max", "max_aero_n_max"),
    ("aero.k_max", "max_aero_k_max"),
    ("aero.k", "max_aero_k"),
    ("aero.delta_n", "max_aero_delta_n"),
    ("dapo.max_gen_rounds", "max_dapo_gen_rounds"),
    ("resources.nodes", "max_nodes"),
    ("code.memory_mb", "sandbox_memory_mb"),
    ("code.max_processes", "sandbox_max_processes"),
    ("code.max_output_bytes", "sandbox_max_output_bytes"),
    ("code.test_timeout_s", "sandbox_test_timeout_s"),
    ("code.timeout_s", "sandbox_timeout_s"),
    ("code.workers", "sandbox_workers"),
)

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
    if cfg.code.audit_hook == "fallback" and policy.sandbox_audit_hook == "always":
        issues.append(("code.audit_hook", "the operator requires the audit hook always (AERO_SANDBOX_AUDIT_HOOK)"))
    issues += webhook_policy_issues(cfg.alerts, policy.webhook_hosts)
    roots = policy.resolved_roots()
    if roots is not None:
        paths = [("model_path", cfg.model_path), ("train_data", cfg.train_data)]
        paths += [(f"benchmarks.{name}", p) for name, p in cfg.benchmarks.items()]
        issues += [(field, OUTSIDE_ROOTS) for field, p in paths if p is not None and not under_roots(p, roots, policy.denied)]
    return issues
