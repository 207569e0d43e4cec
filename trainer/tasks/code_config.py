"""The code task's config section: the sandbox limits a run asks for, their operator caps and rule.

The code task owns it (``TaskSpec.section``, trainer/tasks/registry.py), so ``RunConfig`` carries a
``code`` block exactly when ``task="code"``. Pydantic and the stdlib only: the registry, the
backend and the config module import this without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from trainer.spec.config_types import Cap, Field, Issues, Section, Strict

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig


class CodeConfig(Strict):
    """Code task: the sandbox that runs candidate programs (docs/tasks.md "Code").

    The paper gives no sandbox limits; the defaults follow common APPS/TACO/PRIME practice
    (a few seconds per test, ~1 GiB)."""

    test_timeout_s: Annotated[float, Cap("sandbox_test_timeout_s", "AERO_SANDBOX_MAX_TEST_TIMEOUT_S", 60.0,
                                         "Cap on code.test_timeout_s.", ge=None, gt=0)] = Field(
        4.0, gt=0.0, le=600.0, description="Per test: wall-clock limit (the test's process is killed) and CPU-time "
        "limit (RLIMIT_CPU, rounded up to whole seconds). After a timeout the candidate's remaining tests are skipped "
        "(counted as failed).")
    timeout_s: Annotated[float, Cap("sandbox_timeout_s", "AERO_SANDBOX_MAX_TIMEOUT_S", 600.0,
                                    "Cap on code.timeout_s.", ge=None, gt=0)] = Field(
        30.0, gt=0.0, le=3600.0, description="Wall-clock limit for one candidate over all its tests, start-up "
        "included; past it the whole sandbox (process group / PID namespace) is SIGKILLed and the candidate scores 0 "
        "as a timeout.")
    memory_mb: Annotated[int, Cap("sandbox_memory_mb", "AERO_SANDBOX_MAX_MEMORY_MB", 4096,
                                  "Cap on code.memory_mb (RLIMIT_AS per process, MiB).", ge=64)] = Field(
        1024, ge=64, le=1_048_576, description="Address-space limit per process (RLIMIT_AS), MiB.")
    max_processes: Annotated[int, Cap("sandbox_max_processes", "AERO_SANDBOX_MAX_PROCESSES", 256,
                                      "Cap on code.max_processes (RLIMIT_NPROC).", ge=2)] = Field(
        64, ge=2, le=100_000, description="RLIMIT_NPROC: processes and threads of the sandbox user (counted per uid; "
        "a root worker gives each candidate scored at once its own uid from AERO_SANDBOX_UID / "
        "AERO_SANDBOX_UID_COUNT).")
    max_output_bytes: Annotated[int, Cap("sandbox_max_output_bytes", "AERO_SANDBOX_MAX_OUTPUT_BYTES", 16 << 20,
                                         "Cap on code.max_output_bytes.", ge=1024)] = Field(
        1_048_576, ge=1024, le=1 << 30, description="Cap on a test's captured stdout (the process is killed past it) "
        "and on any file it writes (RLIMIT_FSIZE).")
    audit_hook: Literal["always", "fallback"] = Field(
        "always", description="Install the audit hook (blocks sockets, subprocesses, ctypes, writes outside the "
        "sandbox directory) always, or only when namespaces are unavailable ('fallback' needs the operator's "
        "AERO_SANDBOX_AUDIT_HOOK=fallback).")
    workers: Annotated[int, Cap("sandbox_workers", "AERO_SANDBOX_MAX_WORKERS", 64, "Cap on code.workers "
                                "(sandboxes at once; 0 = min(8, CPUs) is always allowed).")] = Field(
        0, ge=0, le=1024, description="Sandboxes run at once when scoring a batch (0 = min(8, CPUs)).")
    max_tests: int = Field(0, ge=0, le=1_000_000, description="Keep the first N tests of each problem (0 = all).")


def code_rules(cfg: RunConfig) -> Issues:
    if cfg.code.timeout_s < cfg.code.test_timeout_s:
        return [("code.timeout_s", f"must be >= code.test_timeout_s ({cfg.code.test_timeout_s})")]
    return []


CODE_SECTION = Section(
    name="code", model=CodeConfig, title="Code sandbox", rules=code_rules,
    form=(("code.test_timeout_s", "test timeout (s)"), ("code.timeout_s", "candidate timeout (s)"),
          ("code.memory_mb", "memory (MiB)"), ("code.workers", "sandboxes at once")),
    # the block's former fields, the operator's settings now (stored configs lost them in Alembic 0009)
    operator_fields=(("network", "AERO_SANDBOX_ISOLATION"), ("run_as_uid", "AERO_SANDBOX_UID"),
                     ("python", "AERO_SANDBOX_PYTHON")),
)
