"""The task registry: one entry per task says what the platform needs to know about it, so a
new task is its module plus one entry here (the config's choices and rules, the embedded
engine's construction, verl's rows and reward, the launch form all read it). As a method's spec
does, a task's entry carries its config section (the code task's sandbox limits, with their
operator caps and rule: ``RunConfig`` holds a ``code`` block exactly when ``task="code"``), its
own submit-time rules and its build hook. Nothing outside trainer/tasks/ compares task names
(tests/test_registry_names.py scans for it).

Light on purpose (stdlib and pydantic only): the API's config validation imports it. Task
classes, builders, rules and scorers are named as ``"module:attribute"`` and imported when used.

``source`` says where problems come from, which decides most rules:

``generated``  a seeded stream with levels and an exact verifier (trainer/tasks/generated.py),
               a char tokenizer, and a shipped preset trained on it (``preset``); a finite
               ``train_size`` gives stable prompt ids; verl rows carry ``extra_info.task`` and
               ``extra_info.problem`` (the prompt text) and are scored by
               ``score_problem(response, Problem)``, the task's own verifier.
``files``      local training data and benchmark files (``train_data``, ``benchmarks``) with a
               local model's tokenizer.
``scripted``   rewards scripted on a random-weight ``model_shape`` (cost benchmarks only).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from trainer.spec.config_types import Section
from trainer.models.catalog import MODELS
from trainer.tasks.code_config import CODE_SECTION


@dataclass(frozen=True)
class TaskSpec:
    name: str
    description: str  # one line for help texts and the launch form
    source: Literal["generated", "files", "scripted"]
    task_class: str  # "module:Class" implementing trainer.tasks.base.Task
    engines: tuple[str, ...] = ("embedded", "verl")
    preset: str | None = None  # generated tasks: the shipped preset trained on it
    preset_description: str = ""
    score_problem: str | None = None  # generated tasks: "module:function(response, Problem) -> float"
    # generated tasks asked in words (a real model's chat template): the free-text verifier, same signature
    score_text: str | None = None
    # the config block this task owns (trainer/spec/config_types.py Section), present exactly when it runs
    section: Section | None = None
    # "module:function(cfg, common, policy) -> Task": builds a files task the embedded engine trains
    # (``common``: tokenizer, benchmark paths, prompt cap); None = make_task(name, train_path, **common)
    build: str | None = None

    @property
    def section_name(self) -> str | None:
        return self.section.name if self.section is not None else None


TASK_SPECS: dict[str, TaskSpec] = {s.name: s for s in (
    TaskSpec("arithmetic", "synthetic integer arithmetic at six levels, exact-match reward (the tiny preset)",
             "generated", "trainer.tasks.arithmetic:ArithmeticTask", preset="tiny",
             preset_description="the shipped ~1M-parameter policy on the synthetic arithmetic task",
             score_problem="trainer.tasks.arithmetic:score_problem",
             score_text="trainer.tasks.arithmetic:score_problem_text"),
    TaskSpec("countdown", "Countdown (TinyZero): reach a target from given numbers with + - * /, each used at most "
             "once; a strict equation verifier (the tiny-countdown preset)", "generated",
             "trainer.tasks.countdown:CountdownTask", preset="tiny-countdown",
             preset_description="the shipped ~1M-parameter policy on the Countdown task",
             score_problem="trainer.tasks.countdown:score_problem",
             score_text="trainer.tasks.countdown:score_problem_text"),
    TaskSpec("math", "math problems from a local verl parquet / JSONL file, math-verify reward (a local model)",
             "files", "trainer.tasks.math:MathTask"),
    TaskSpec("code", "programming problems from a local file, rewarded by sandboxed tests (a local model)",
             "files", "trainer.tasks.code:CodeTask", engines=("embedded",), section=CODE_SECTION,
             build="trainer.tasks.code:build_code_task"),
    TaskSpec("strata", "scripted rewards with the paper's prompt strata on a random-weight model_shape (cost "
             "benchmarks only)", "scripted", "trainer.tasks.scripted:StrataTask", engines=("embedded",)),
)}
TASK_NAMES: tuple[str, ...] = tuple(TASK_SPECS)
# The presets: the shipped ones, each trained on one generated task (trainer/assets/<preset>/),
# then the installed models (trainer/models/catalog.py), each serving the generated tasks it lists.
PRESET_TASKS: dict[str, tuple[str, ...]] = {**{s.preset: (s.name,) for s in TASK_SPECS.values() if s.preset},
                                            **{m.name: m.tasks for m in MODELS.values()}}
PRESET_TASK: dict[str, str] = {name: tasks[0] for name, tasks in PRESET_TASKS.items()}  # a bare preset's task
PRESET_NAMES: tuple[str, ...] = tuple(PRESET_TASKS)
SHIPPED_PRESETS: tuple[str, ...] = tuple(p for p in PRESET_NAMES if p not in MODELS)


def get_task_spec(name: str) -> TaskSpec:
    try:
        return TASK_SPECS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(TASK_NAMES)}") from None


def task_sections() -> tuple[Section, ...]:
    """Every task's config section, once each, in registry order."""
    out: dict[str, Section] = {}
    for s in TASK_SPECS.values():
        if s.section is not None and out.setdefault(s.section.name, s.section) is not s.section:
            raise ValueError(f"two task sections are named {s.section.name!r}")
    return tuple(out.values())


def tasks_with(source: str) -> tuple[str, ...]:
    return tuple(n for n, s in TASK_SPECS.items() if s.source == source)


def section_tasks(section: str) -> tuple[str, ...]:
    """The tasks whose config section is ``section`` (as ``section_readers`` is for methods)."""
    return tuple(n for n, s in TASK_SPECS.items() if s.section_name == section)


def without_stale_task_sections(data: Mapping[str, Any], task: Any) -> Mapping[str, Any]:
    """``data`` (a raw run config for ``task``) without another task's section that holds only
    its defaults: every config dumped before the code block became the code task's section had
    one, whatever its task (saved JSON files, API responses). Each dropped block warns
    (ConfigDeprecationWarning); a block with values of its own stays, and the config refuses it.
    ``data`` itself when there is nothing to drop (an unknown task's own error names it)."""
    if not isinstance(task, str) or task not in TASK_SPECS:  # a list or dict: the task field's own error
        return data
    stale = [sec for sec in task_sections()
             if sec.name != TASK_SPECS[task].section_name and isinstance(data.get(sec.name), dict)]
    if not stale:
        return data
    from pydantic import ValidationError  # here: scripts/gpu_check.py imports the registry without pydantic

    from trainer.spec.config_renames import ConfigDeprecationWarning

    out = dict(data)
    for sec in stale:
        try:
            default = sec.model.model_validate(out[sec.name]).model_dump() == sec.model().model_dump()
        except ValidationError:
            default = False
        if default:
            del out[sec.name]
            warnings.warn(f"run config: the {sec.name} block is the {' and '.join(section_tasks(sec.name))} task's "
                          f"own now; the {task} task ignores it (it held the defaults): remove it",
                          ConfigDeprecationWarning, stacklevel=2)
    return out


def retasked(data: Mapping[str, Any], old_task: Any, kept: Iterable[str] = ()) -> dict[str, Any]:
    """``data``, a config whose task was ``old_task`` before a change (a clone's ``--set``, a
    sweep's override), without the old task's section when the task changed, unless the change
    itself gave it (``kept``: the change's top-level keys)."""
    old = TASK_SPECS[old_task].section_name if old_task in TASK_SPECS else None
    if old is None or data.get("task", old_task) == old_task or old in set(kept):
        return dict(data)
    return {k: v for k, v in data.items() if k != old}
