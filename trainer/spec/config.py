"""Run configuration: typed, validated once, stored with each run as JSON.

This module is imported by the backend, so it must stay light: pydantic and the stdlib only
(no torch). Defaults follow the AERO paper (arXiv 2602.14338, Table 9) unless a comment says
why the embedded tiny preset departs from them.

Use :func:`parse_run_config` to build a config from untrusted input: it returns the config or
raises :class:`ConfigError`, whose ``issues`` name every bad field by its dotted path
(``aero.n_explore``), including cross-field rules pydantic cannot express per field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (AfterValidator, Field, ValidationError, ValidationInfo, create_model, field_validator,
                      model_serializer, model_validator)

from common.dotted import with_defaults
from trainer.spec.alerts import AlertsConfig, rule_issues
from trainer.spec.config_renames import read_renamed
from trainer.spec.config_rules import method_issues, sampler_issues, shape_issues
from trainer.spec.offpolicy import OffPolicyConfig, offpolicy_issues
from trainer.spec.config_types import Cap, Section, Strict, basic
from trainer.spec.config_rules import engine_issues
from trainer.spec.engine_registry import ENGINE_NAMES
from trainer.models.catalog import MODELS
from trainer.methods.spec import all_sections, get_method, method_names, section_readers, specs
from trainer.spec.resources import ResourcesConfig, resource_issues
from trainer.spec.safetext import no_control_chars
from trainer.spec.sampler_registry import RolloutConfig
from trainer.tasks.registry import (PRESET_NAMES, PRESET_TASK, PRESET_TASKS, TASK_NAMES, TASK_SPECS, get_task_spec, section_tasks,
                                    task_sections, without_stale_task_sections)

if TYPE_CHECKING:
    from trainer.spec.operator_policy import RunPolicy

# The registered methods (trainer/methods/): the schema's enum and pydantic's literal_error
# message name exactly these.
METHODS: tuple[str, ...] = method_names()
METHOD_SECTION_NAMES: tuple[str, ...] = tuple(sec.name for sec in all_sections())
# The tasks' sections (trainer/tasks/registry.py ``TaskSpec.section``: the code task's sandbox).
TASK_SECTION_NAMES: tuple[str, ...] = tuple(sec.name for sec in task_sections())
SECTION_NAMES: tuple[str, ...] = METHOD_SECTION_NAMES + TASK_SECTION_NAMES
Method = Literal[METHODS]  # type: ignore[valid-type]
LossAgg = Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"]
# The shipped architectures with random weights (trainer/embedded/shapes.py; one directory each
# under trainer/assets/shapes/): the scripted strata task runs on them, nothing is downloaded.
ModelShape = Literal["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b", "tiny-151k"]
# The registered tasks and the shipped presets (trainer/tasks/registry.py).
TaskName = Literal[TASK_NAMES]  # type: ignore[valid-type]
EngineName = Literal[ENGINE_NAMES]  # type: ignore[valid-type]
Preset = Literal[PRESET_NAMES]  # type: ignore[valid-type]


TRACKERS = ("wandb", "mlflow", "tensorboard")
Tracker = Literal["wandb", "mlflow", "tensorboard"]


class OptimConfig(Strict):
    lr: float = Field(1e-4, gt=0.0, description="AdamW learning rate. Paper: 5e-6 for 1.5B-7B models. Tiny preset: 1e-4 "
                      "(chosen by the sweep in BENCHMARKS.md; set ~5e-6 for a real model).", json_schema_extra=basic())
    warmup_ratio: float = Field(0.03, ge=0.0, lt=1.0, description="Linear warmup as a fraction of the run's optimizer steps "
                                "(paper: 0.03). Used when warmup_steps is null.")
    warmup_steps: int | None = Field(10, ge=0, le=1_000_000, description="Linear warmup length in training steps; replaces "
                                     "warmup_ratio when set (tiny preset: 10, as 0.03 of a 60-step run is 2 steps; null = "
                                     "use warmup_ratio, the paper's rule).")
    grad_clip: float = Field(1.0, gt=0.0, description="Gradient-norm clipping (paper: 1.0).")
    weight_decay: float = Field(0.0, ge=0.0)
    beta1: float = Field(0.9, ge=0.0, lt=1.0)
    beta2: float = Field(0.999, ge=0.0, lt=1.0)


class _RunFields(Strict):
    """The fields every run has; :data:`RunConfig` adds the methods' sections."""

    name: Annotated[str, AfterValidator(no_control_chars)] | None = Field(None, max_length=200)
    method: Method = Field("aero", description=" | ".join(f"{s.name} ({s.display.description})" for s in specs()) + ".",
                           json_schema_extra=basic())
    engine: EngineName = Field("embedded", description="The training engine: embedded (one process, CPU or CUDA) or "
                               "verl (extra aero-lab[verl]; docs/engines.md).", json_schema_extra=basic())
    preset: Preset | None = Field("tiny", description="A shipped policy trained on a generated task: " + "; ".join(
        f"{s.preset}: {s.preset_description}" for s in TASK_SPECS.values() if s.preset) + ". Or an installed real "
        "model serving the generated tasks: " + "; ".join(f"{m.name}: {m.description}" for m in MODELS.values()) +
        " (its preset sets the prompt and response lengths, batch and lr it was measured at, unless given). Defaults "
        "to the chosen task's preset (task=countdown alone runs tiny-countdown).",
        # what each installed model's preset fills in (the launch form pre-fills its fields with them)
        json_schema_extra=basic(**{"x-preset-defaults": {m.name: dict(m.defaults) for m in MODELS.values()},
                                   "x-preset-tasks": {m.name: list(m.tasks) for m in MODELS.values()}}))
    model_path: str | None = Field(None, description="Local Hugging Face model directory (used instead of a preset).",
                                   json_schema_extra=basic())
    model_shape: ModelShape | None = Field(
        None, description="A real architecture with RANDOM weights, built from the config file the repository "
        "ships (nothing is downloaded): qwen2.5-0.5b, qwen2.5-1.5b (Qwen2.5-Math-1.5B, the paper's), qwen2.5-7b, or "
        "tiny-151k (hidden 64, 2 layers, the real 151,936 vocab; CPU). For cost benchmarks only (`aero bench --shape`): "
        "it trains the scripted strata task (task=strata), whose rewards are scripted, so no learning is measured. "
        "Used instead of a preset or model_path (set preset=null).")
    task: TaskName = Field("arithmetic", description="; ".join(f"{s.name}: {s.description}"
                                                                for s in TASK_SPECS.values()) + ".", json_schema_extra=basic())
    train_data: str | None = Field(None, description="Math and code tasks: local verl parquet or JSONL file (code: "
                                   "also APPS/TACO, CodeContests, PRIME/Eurus, MBPP/HumanEval layouts).",
                                   json_schema_extra=basic())
    benchmarks: dict[str, str] = Field(
        default_factory=dict,
        description="Math and code tasks: held-out benchmarks as {name: local parquet/JSONL/JSON file}, e.g. "
        "{'MATH-500': '/data/math500.jsonl', 'AIME24': '/data/aime24.parquet'} or {'APPS': '/data/apps.jsonl', "
        "'CodeContests': '/data/cc.parquet', 'TACO': '/data/taco.jsonl'}; evaluated and reported per name, "
        "in the given order. Flat layouts of AIME24, AMC23, MATH-500, Minerva and OlympiadBench are read as shipped.",
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass (HF gradient checkpointing): less memory for "
        "long responses on real models, ~30% more train time. The verl engine maps it to enable_gradient_checkpointing.")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Run seed: sampling, curation and data order.",
                      json_schema_extra=basic())
    steps: Annotated[int, Cap("max_steps", "AERO_MAX_STEPS", 100_000, "Cap on steps.")] = Field(
        60, ge=1, le=1_000_000, json_schema_extra=basic())
    batch_prompts: Annotated[int, Cap("max_batch_prompts", "AERO_MAX_BATCH_PROMPTS", 4096, "Cap on batch_prompts.")] = Field(
        64, ge=1, le=65_536, description="Prompts per step P (paper: 256; tiny preset: 64, chosen by "
                               "the sweep in BENCHMARKS.md).", json_schema_extra=basic())
    n_total: Annotated[int, Cap("max_n_total", "AERO_MAX_N_TOTAL", 512, "Cap on n_total.", ge=2)] = Field(
        16, ge=2, le=4096, description="Rollout budget per prompt, the same for every method (paper: 16).",
        json_schema_extra=basic())
    temperature: float = Field(1.0, gt=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: Annotated[int, Cap("max_new_tokens", "AERO_MAX_NEW_TOKENS", 32_768, "Cap on max_new_tokens.")] = Field(
        12, ge=1, description="Response length cap (paper: 1536; tiny preset: 12).", json_schema_extra=basic())
    max_prompt_tokens: Annotated[int, Cap("max_prompt_tokens", "AERO_MAX_PROMPT_TOKENS", 32_768,
                                          "Cap on max_prompt_tokens.")] = Field(32, ge=1, description="Prompt length cap (paper: 1024; tiny preset: 32).")
    train_size: int | None = Field(None, ge=1, le=10_000_000, description="Arithmetic task: train on a finite set of "
                                   "N problems drawn in epochs (seeded permutations), with stable prompt ids; null = "
                                   "the infinite seeded stream. Math and code use their file.")
    clip_eps: float = Field(0.2, gt=0.0, lt=1.0, description="PPO clip range for GRPO/AERO (paper: 0.2).")
    entropy_coef: float = Field(1e-3, ge=0.0, description="Entropy bonus coefficient (paper: 1e-3).")
    kl_coef: float = Field(0.0, ge=0.0, description="k3 KL penalty to the initial policy (0 = off, no reference forward).")
    loss_agg: LossAgg | None = Field(None, description="Loss aggregation; default: the method's (seq-mean-token-mean "
                                       "for GRPO/AERO, token-mean for DAPO, seq-mean-token-sum-norm for Dr.GRPO).")
    adv_estimator: Literal["grpo", "drgrpo"] = Field("grpo", description="grpo: (r-mean)/(std+eps); drgrpo: r-mean (Dr.GRPO).")
    std_unbiased: bool = Field(True, description="Group std with Bessel's correction (as verl/torch.std).")
    ppo_epochs: int = Field(1, ge=1, le=16, description="Passes over each step's batch (paper: 1).")
    mini_batches: int = Field(1, ge=1, le=1024, description="Optimizer steps per pass.")
    micro_batch_tokens: int = Field(
        0, ge=0, le=1 << 24, description="Token budget of one update forward (rows x padded length; verl's "
        "ppo_max_token_len_per_gpu): each mini-batch is cut into micro-batches of at most this many tokens and their "
        "gradients accumulated, with the loss normalised as one pass. 0 = auto: the embedded engine picks the largest "
        "budget the device's memory holds (docs/engines.md); verl takes max(4 x (prompt + response), 8192). Must "
        "hold one row: >= max_prompt_tokens + max_new_tokens.")
    packed_update: Literal["auto", "on", "off"] = Field(
        "auto", description="Lay each update micro-batch's sequences end to end in one row (position ids restarting "
        "per sequence, attention kept inside each sequence) instead of padding them to the longest: the same losses "
        "and gradients up to float rounding, no compute on padding, micro_batch_tokens counting real tokens. on: "
        "packed on every engine (verl: use_remove_padding, CUDA only, so verl needs device=cuda); off: padded on "
        "every engine; auto: the embedded engine pads (packing not yet measured faster there), verl packs on CUDA "
        "and pads on the CPU (docs/engines.md).")
    shuffle_mini_batches: bool = Field(True, description="With mini_batches > 1: deal the training rows into "
                                       "mini-batches afresh each PPO epoch (seeded by the run, checkpointed). false "
                                       "keeps them in generation order, as the verl engine lays them out (verl "
                                       "refuses true with several mini-batches).")
    eval_every: int = Field(5, ge=0, le=1_000_000, description="Evaluate every K steps, and at step 0 (the base) and the end (0 = only "
                            "at the end). Evaluation time is not counted in a run's training time.",
                            json_schema_extra=basic())
    eval_n: Annotated[int, Cap("max_eval_n", "AERO_MAX_EVAL_N", 1024, "Cap on eval_n.")] = Field(
        8, ge=1, le=1024, description="Samples per eval problem (Avg@k / Pass@k with k <= eval_n).")
    eval_temperature: float = Field(1.0, ge=0.0, le=10.0, description="Sampling temperature of held-out evaluation, "
                                    "independent of the training temperature (paper: 1.0, Table 9; 0 = greedy). Eval "
                                    "draws are seeded by the eval's step only, so every run of the same base is "
                                    "evaluated on paired draws.")
    eval_problems: Annotated[int, Cap("max_eval_problems", "AERO_MAX_EVAL_PROBLEMS", 100_000,
                                      "Cap on eval_problems.")] = Field(64, ge=1, description="Problems per benchmark at eval.")
    checkpoint_every: int = Field(20, ge=0, le=1_000_000, description="Checkpoint every K steps (0 = only at the end).")
    keep_checkpoints: Annotated[int, Cap("max_keep_checkpoints", "AERO_MAX_KEEP_CHECKPOINTS", 5,
                                         "Cap on keep_checkpoints (checkpoints a run keeps on disk).")] = Field(
        2, ge=1, le=1000, description="Checkpoints a run keeps on disk, newest first; each save deletes older ones "
        "(verl: max_actor_ckpt_to_keep). 2 keeps one to fall back on if the newest cannot be read. A checkpoint "
        "holds the weights and the optimizer: ~1.6 GB for a 135M model, tens of GB at 1.5B.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA when available, else CPU.",
                                                   json_schema_extra=basic())
    dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description="auto: bfloat16 on CUDA, float32 on CPU. On CUDA, "
                                                             "bfloat16 is bf16 compute (autocast) over float32 master weights, so small "
                                                             "updates (lr 5e-6) are not rounded away; on CPU it stores the weights in bf16.")
    verifier_timeout_s: float = Field(5.0, gt=0.0, le=600.0)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="How the rollouts are generated: the "
                                   "sampler, its decode, its random source and the schedule of a method that "
                                   "generates in rounds (trainer/spec/sampler_registry.py).")
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig, description="GPUs per node, nodes and "
                                       "rollout tensor parallelism the run holds while it trains (trainer/spec/resources.py): "
                                       "a run waits until they are free and never shares a GPU with another run.")
    offpolicy: OffPolicyConfig = Field(default_factory=OffPolicyConfig, description="Asynchronous training "
                                       "(trainer/spec/offpolicy.py): the sampler runs up to max_staleness steps ahead of "
                                       "the trainer, and the loss corrects for the stale rows.")
    alerts: AlertsConfig = Field(default_factory=AlertsConfig, description="Alert rules and early stopping "
                                 "(trainer/spec/alerts.py): each rule notifies (recorded, posted to the webhook) and/or stops "
                                 "the run cleanly with a checkpoint.")
    trackers: list[Tracker] = Field(default_factory=list, max_length=len(TRACKERS), description="Experiment trackers "
                                    "this run also logs to (extra aero-lab[trackers]): wandb (offline unless the operator "
                                    "sets AERO_WANDB_MODE=online), mlflow (the operator's AERO_MLFLOW_TRACKING_URI, else a "
                                    "SQLite store in the run directory), tensorboard (event files in the run directory). "
                                    "The operator's AERO_TRACKERS are added to every run.")

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        """A renamed or moved field (``sampler`` is ``rollout.sampler``) is read as its new one with a deprecation warning,
        or refused under its old name (trainer/spec/config_renames.py)."""
        return read_renamed(data, cls.__name__)

    @model_validator(mode="before")
    @classmethod
    def _preset_and_task_agree(cls, data: Any) -> Any:
        """Either names the other: a generated task's shipped preset is the preset when none is
        given (nor a model_path or model_shape), so ``{"task": "countdown"}`` alone runs
        tiny-countdown; a preset's task is the task when none is given (``{"preset":
        "tiny-countdown"}`` trains countdown)."""
        if not isinstance(data, dict):
            return data
        if "preset" not in data and not data.get("model_path") and not data.get("model_shape") \
                and isinstance(data.get("task"), str):
            spec = TASK_SPECS.get(data["task"])
            if spec is not None and spec.preset:
                return {**data, "preset": spec.preset}
        preset = data.get("preset")
        if isinstance(preset, str) and preset in MODELS:  # an installed model's measured defaults (catalog.py)
            method = data.get("method", _RunFields.model_fields["method"].default)
            # a method section's defaults only for a method that reads it (another method would refuse it)
            data = with_defaults(data, {k: v for k, v in MODELS[preset].defaults.items()
                                        if "." not in k or k.split(".")[0] not in METHOD_SECTION_NAMES
                                        or method in section_readers(k.split(".")[0])})
        if "task" not in data and isinstance(preset, str) and preset in PRESET_TASK:
            return {**data, "task": PRESET_TASK[preset]}
        return data

    @model_serializer(mode="wrap")
    def _without_absent_sections(self, handler):
        """Dumps omit the sections the method does not read (they are None)."""
        out = handler(self)
        return {k: v for k, v in out.items() if not (k in SECTION_NAMES and v is None)} if isinstance(out, dict) else out


def _section_field(sec, shared: bool = False) -> tuple[Any, Any]:
    if sec.name in TASK_SECTION_NAMES:
        names, who = section_tasks(sec.name), "tasks"
    else:
        names, who = section_readers(sec.name), "methods"
    rule = f"each run of those {who} takes it" if shared else f"defaults when omitted; refused for other {who}"
    # "x-tasks" / "x-methods": who reads it, for clients (the Launch form shows a task's section for that task)
    return sec.model | None, Field(None, description=f"{sec.title}: read by {', '.join(names)} only ({rule}).",
                                   json_schema_extra={f"x-{who}": list(names)})


def _task_of(data: dict) -> Any:
    """The task a raw config names (its preset's when only a preset is given), else None."""
    task = data.get("task")
    if task is None and isinstance(data.get("preset"), str):
        task = PRESET_TASK.get(data["preset"])
    return _RunFields.model_fields["task"].default if task is None else task


class _MethodSections(_RunFields):
    """The sections of exactly the chosen method and task (see :data:`RunConfig`)."""

    @model_validator(mode="before")
    @classmethod
    def _own_sections(cls, data: Any) -> Any:
        """A section the chosen method or task reads defaults to its model's defaults when
        omitted (or null); one it does not read is refused by :meth:`_section_of_run`."""
        if not isinstance(data, dict):
            return data
        task_name = _task_of(data)
        data = without_stale_task_sections(data, task_name)
        own: list[Section] = []
        try:
            own += get_method(data.get("method", cls.model_fields["method"].default)).sections
        except (TypeError, ValueError):
            pass  # the method field's own error names it
        task = TASK_SPECS.get(task_name) if isinstance(task_name, str) else None
        own += [task.section] if task is not None and task.section is not None else []
        return {**data, **{sec.name: {} for sec in own if data.get(sec.name) is None}}

    @field_validator(*SECTION_NAMES, mode="after", check_fields=False)
    @classmethod
    def _section_of_run(cls, value: Any, info: ValidationInfo) -> Any:
        name = str(info.field_name)
        if value is None:
            return value
        if name in TASK_SECTION_NAMES:
            task = info.data.get("task")
            if task is not None and get_task_spec(task).section_name != name:
                raise ValueError(f"task {task} has no {name} section (read by the {', '.join(section_tasks(name))} "
                                 "task); remove it")
            return value
        method = info.data.get("method")
        if method is not None and not get_method(method).reads(name):
            raise ValueError(f"method {method} has no {name} section (read by "
                             f"{', '.join(section_readers(name))}); remove it")
        return value

    @property
    def effective_loss_agg(self) -> str:
        """``loss_agg`` when set, else the method's default (trainer/methods/)."""
        if self.loss_agg is not None:
            return self.loss_agg
        return get_method(self.method).loss_agg


if TYPE_CHECKING:
    from trainer.methods.aero import AEROConfig
    from trainer.methods.aero_mem import AEROMemConfig
    from trainer.methods.cppo import CPPOConfig
    from trainer.methods.dapo import DAPOConfig
    from trainer.methods.greso import GRESOConfig
    from trainer.methods.knapsack import KnapsackConfig
    from trainer.methods.pilot_commit import PilotCommitConfig
    from trainer.methods.speed import SPEEDConfig
    from trainer.tasks.code_config import CodeConfig

    class RunConfig(_MethodSections):
        """The typed view of :data:`RunConfig` that mypy and IDEs see (the runtime class is built
        from the method registry below; tests/trainer/spec/test_config_view.py keeps the two equal).
        Each section is typed as present: it is, whenever the method that reads it runs."""

        aero: AEROConfig
        dapo: DAPOConfig
        speed: SPEEDConfig
        knapsack: KnapsackConfig
        greso: GRESOConfig
        aero_mem: AEROMemConfig
        pilot_commit: PilotCommitConfig
        cppo: CPPOConfig
        code: CodeConfig
else:
    # One training run, stored with the run as JSON (``model_dump(mode='json')``): the common
    # fields plus one optional block per method section, present exactly when the chosen method
    # reads it.
    RunConfig = create_model("RunConfig", __base__=_MethodSections, __module__=__name__,
                             __doc__="One training run. Stored with the run as JSON (``model_dump(mode='json')``).",
                             **{sec.name: _section_field(sec) for sec in (*all_sections(), *task_sections())})
# A config shared by several methods (a sweep's base): any section may be present, each checked
# by its own model; :func:`for_method` turns it into one method's config.
SharedConfig = create_model("SharedConfig", __base__=_RunFields, __module__=__name__,  # type: ignore[call-overload]
                            __doc__="A run config shared by several methods (a sweep's base): every method's "
                            "section may be given; each run keeps the sections its method reads.",
                            **{sec.name: _section_field(sec, shared=True) for sec in (*all_sections(),
                                                                                      *task_sections())})


class ConfigError(ValueError):
    """A config that cannot run. ``issues`` is a list of (dotted field path, message)."""

    def __init__(self, issues: list[tuple[str, str]]):
        self.issues = issues
        super().__init__("; ".join(f"{loc}: {msg}" for loc, msg in issues))


def cross_field_issues(cfg: RunConfig) -> list[tuple[str, str]]:
    """Rules that span fields. Each names the field a user should change. The method's own
    rules are its sections' (trainer/methods/<name>.py)."""
    task = get_task_spec(cfg.task)
    own = (*get_method(cfg.method).sections, *((task.section,) if task.section is not None else ()))
    issues = [issue for sec in own for issue in sec.rules(cfg)]
    issues += rule_issues(cfg.alerts)
    if len(set(cfg.trackers)) < len(cfg.trackers):
        issues.append(("trackers", "name each tracker once"))
    if cfg.model_shape is None and (cfg.preset is None) == (cfg.model_path is None):
        issues.append(("model_path", "give exactly one of preset or model_path"))
    issues += shape_issues(cfg)
    if task.source == "files" and not cfg.train_data:
        issues.append(("train_data", f"the {cfg.task} task needs a local parquet or JSONL file"))
    if cfg.preset is not None and cfg.task not in PRESET_TASKS[cfg.preset]:
        fix = f"use preset {task.preset}" if task.preset else "set preset=null and give a model_path"
        served = PRESET_TASKS[cfg.preset]
        what = (f"serves the {' and '.join(served)} tasks" if cfg.preset in MODELS else f"is trained on the {served[0]} task")
        issues.append(("task", f"the {cfg.preset} preset {what}; for the {cfg.task} task {fix}"))
    if cfg.mini_batches > cfg.batch_prompts:
        issues.append(("mini_batches", f"must be <= batch_prompts ({cfg.batch_prompts})"))
    if 0 < cfg.micro_batch_tokens < cfg.max_prompt_tokens + cfg.max_new_tokens:
        issues.append(("micro_batch_tokens", f"must hold one row: >= max_prompt_tokens + max_new_tokens "
                       f"({cfg.max_prompt_tokens + cfg.max_new_tokens}), or 0 for the device's own budget"))
    if cfg.benchmarks and task.source != "files":
        issues.append(("benchmarks", f"benchmark files are for the {' and '.join(_files_tasks())} tasks; the "
                       f"{cfg.task} task has its own held-out sets"))
    for name, path in cfg.benchmarks.items():
        if not name.strip() or not str(path).strip():
            issues.append(("benchmarks", f"each benchmark needs a name and a local file path; got {name!r}: {path!r}"))
    issues += sampler_issues(cfg)
    issues += engine_issues(cfg)
    issues += resource_issues(cfg)
    issues += method_issues(cfg)
    issues += offpolicy_issues(cfg)
    if cfg.train_size is not None and task.source != "generated":
        issues.append(("train_size", f"a finite training set is an option of the generated tasks; the {cfg.task} "
                       "task trains on its file" if task.source == "files" else
                       f"a finite training set is an option of the generated tasks, not of {cfg.task}"))
    return issues


def _files_tasks() -> list[str]:
    return [n for n, s in TASK_SPECS.items() if s.source == "files"]


def for_method(data: Mapping[str, Any], method: str) -> dict[str, Any]:
    """``data``, a config shared by several methods (a sweep's base and overrides, a bench's
    ``--set``s), for ``method``: the sections it does not read are dropped. An unknown method is
    left for :func:`parse_run_config` to name."""
    try:
        spec = get_method(method)
    except ValueError:
        return {**data, "method": method}
    return {**{k: v for k, v in data.items() if k not in METHOD_SECTION_NAMES or spec.reads(k)}, "method": method}


def unread_sections(data: Mapping[str, Any], methods: Sequence[str]) -> list[tuple[str, str]]:
    """Issues for sections in ``data`` that none of ``methods`` reads (a shared config's typo
    or a forgotten method: :func:`for_method` would drop them silently)."""
    known = [m for m in methods if m in METHODS]
    return [(name, f"no method of {', '.join(known)} reads the {name} section; remove it or add a method that does")
            for name in METHOD_SECTION_NAMES if data.get(name) is not None and known
            and not set(known) & set(section_readers(name))]


def operator_field_message(loc: Sequence[Any]) -> str | None:
    """For an unknown field at ``loc`` that is an operator setting (a section's former field,
    ``Section.operator_fields``): what to do; else None."""
    if len(loc) != 2:
        return None
    for sec in (*all_sections(), *task_sections()):
        env = dict(sec.operator_fields).get(str(loc[1])) if sec.name == loc[0] else None
        if env is not None:
            return f"an operator setting ({env}), not a run-config field; remove it"
    return None


def _message(err: Mapping[str, Any]) -> str:
    """A validation error's message; an unknown field that is an operator setting says which."""
    hint = operator_field_message(tuple(err["loc"])) if err["type"] == "extra_forbidden" else None
    return hint or str(err["msg"])


def parse_run_config(data: dict[str, Any] | RunConfig, policy: RunPolicy | None = None) -> RunConfig:
    """Validate untrusted input into a RunConfig, or raise ConfigError naming every bad field.
    With the operator's ``policy`` (trainer/spec/operator_policy.py), also its caps and data roots."""
    if isinstance(data, RunConfig):
        data = data.model_dump()
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError([(".".join(str(p) for p in err["loc"]) or "config", _message(err)) for err in e.errors()]) from None
    if policy is not None:  # the GPU count, worked out once under the operator's default (trainer/spec/resources.py)
        cfg = policy.resolve(cfg)
    issues = cross_field_issues(cfg)
    if policy is not None:
        issues += policy.issues(cfg)
    if issues:
        raise ConfigError(issues)
    return cfg
