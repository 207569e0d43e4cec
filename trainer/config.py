"""Run configuration: typed, validated once, stored with each run as JSON.

This module is imported by the backend, so it must stay light: pydantic and the stdlib only
(no torch). Defaults follow the AERO paper (arXiv 2602.14338, Table 9) unless a comment says
why the embedded tiny preset departs from them.

Use :func:`parse_run_config` to build a config from untrusted input: it returns the config or
raises :class:`ConfigError`, whose ``issues`` name every bad field by its dotted path
(``aero.n_explore``), including cross-field rules pydantic cannot express per field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic.json_schema import SkipJsonSchema

from trainer.methods.spec import get_method, method_names, specs
from trainer.safetext import no_control_chars  # noqa: F401  (also backend.schemas's, via this module)

if TYPE_CHECKING:
    from trainer.policy import RunPolicy

# The registered methods (trainer/methods/): the schema's enum and pydantic's literal_error
# message name exactly these.
METHODS: tuple[str, ...] = method_names()
Method = Literal[METHODS]  # type: ignore[valid-type]
LossAgg = Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"]


def _numeric_kind(annotation: Any) -> str | None:
    """"integer" / "number" for an int / float field (``| None`` allowed), else None."""
    import types
    import typing

    args = [a for a in typing.get_args(annotation) if a is not type(None)] \
        if typing.get_origin(annotation) in (typing.Union, types.UnionType) else [annotation]
    if args and all(a in (int, float) for a in args):
        return "integer" if all(a is int for a in args) else "number"
    return None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """Numbers must be numbers: "10" and true are refused for int and float fields (pydantic's
        lax mode would coerce them), and 10.5 for an int field as before; 10.0 stays an int."""
        kind = _numeric_kind(cls.model_fields[info.field_name].annotation)
        if kind and isinstance(value, (str, bytes, bool)):
            from pydantic_core import PydanticCustomError

            raise PydanticCustomError("int_type" if kind == "integer" else "float_type",
                                      "Input should be a JSON {kind}, not {what}",
                                      {"kind": kind, "what": "a boolean" if isinstance(value, bool) else "a string"})
        return value


class AEROConfig(_Strict):
    """AERO allocation and curation (paper §4, Algorithm 1, Table 9 'AERO Sampling')."""

    n_explore: int = Field(8, ge=1, le=4096, description="Stage I exploration rollouts per prompt (paper: 8).")
    n_max: int = Field(32, ge=1, description="Cap on rollouts per prompt, exploration included (paper: 32).")
    delta_n: int = Field(2, ge=1, description="Extra rollouts per rescue prompt per rescue round (paper: 2 math, 4 code).")
    k_max: int = Field(10, ge=0, description="Maximum rescue rounds K_max (paper: 10 math, 3 code).")
    tau: float = Field(0.5, gt=0.0, le=1.0, description="Success-rate threshold between low- and high-success strata (paper: 0.5).")
    S: int = Field(0, ge=0, le=4096, description="Rescue threshold on correct count: prompts with c <= S are rescued (paper: 0).")
    k: float = Field(1.0, allow_inf_nan=False, le=1e6, description="Negatives kept per positive in low-success groups, "
                     "m = min(k*c, #incorrect) (paper: 1; Thm 4.1 optimum).")
    alpha0: float = Field(1.0, description="Beta prior alpha for the Bayesian baseline (paper: 1).")
    beta0: float = Field(1.0, description="Beta prior beta for the Bayesian baseline (paper: 1).")
    zero_variance_keep: int = Field(4, ge=1, le=4096, description="Rollouts kept from a zero-variance group under S2 (paper §4.4: 4).")
    negative_selection: Literal["random", "first", "longest", "shortest"] = Field(
        "random",
        description="Which incorrect rollouts S3 keeps. The paper says 'top-m most informative' without a definition; "
        "default: uniformly at random (seeded). 'first' = generation order.",
    )
    rescue_negative: Literal["first", "random"] = Field(
        "first", description="Which incorrect rollout joins the first correct one in a rescued group of 2."
    )
    zero_variance_selection: Literal["first", "random"] = Field(
        "first", description="Which rollouts an S2 zero-variance group keeps."
    )
    budget_split: Literal["prompt-order", "round-robin"] = Field(
        "prompt-order",
        description="When the rescue budget cannot give delta_n to every active prompt in a round: 'prompt-order' gives "
        "full delta_n shares in batch order (the last share may be partial); 'round-robin' deals one rollout at a time.",
    )
    rounds_per_call: int = Field(
        0,
        ge=0,
        le=1_000,
        description="Rescue rounds generated per engine call. 0 (default) = every round (up to k_max) in ONE call, "
        "replayed in generation order: the curated groups equal the paper's sequential rounds on the same samples "
        "whenever the budget does not bind (rescue/budget_left > 0); rollouts after a prompt's rescue are generated "
        "(and charged in FLOPs) but not trained. 1 = the paper's sequential rounds, one engine call each (slower by "
        "one call per round). R > 1: R rounds per call.",
    )


class AEROMemConfig(_Strict):
    """aero-mem: AERO with a per-prompt Beta posterior carried across epochs (beyond the paper;
    docs/algorithms.md §7). Needs stable prompt ids: the math and code tasks, or the arithmetic
    task with ``train_size``. Exploration savings are not spent: a step never generates more
    than AERO's n_total * P."""

    gamma: float = Field(0.98, ge=0.0, le=1.0, description="Forgetting per training step since a prompt was last "
                         "seen, applied to its evidence (alpha - alpha0, beta - beta0): 1 = never forget, 0 = AERO's "
                         "from-scratch view. The prior is aero.alpha0 / aero.beta0.")
    adapt_explore: bool = Field(True, description="(a) Explore confidently solved prompts with n_explore_min rollouts "
                                "instead of aero.n_explore.")
    n_explore_min: int = Field(4, ge=1, le=4096, description="(a) The floor: rollouts for a confidently solved prompt, so a "
                               "regression is still seen (capped at aero.n_explore).")
    solved_tau: float = Field(0.75, gt=0.0, lt=1.0, description="(a) A prompt is confidently solved when "
                              "P(p > solved_tau) > solved_conf under its posterior.")
    solved_conf: float = Field(0.8, gt=0.0, lt=1.0, description="(a) Confidence for 'solved' (see solved_tau).")
    preallocate: bool = Field(True, description="(b) Reserve rescue rollouts for known-hard prompts and generate them "
                              "with the exploration, so their rescue does not start from zero.")
    hard_mean: float = Field(0.15, gt=0.0, lt=1.0, description="(b) Known hard: a seen prompt whose posterior mean is "
                             "below this (Beta(1, 1) after 0/8: 0.1).")
    reserve: int = Field(4, ge=1, le=4096, description="(b) Rescue rollouts reserved per known-hard prompt, charged to AERO's "
                         "rescue budget (n_total - n_explore) * P; capped at aero.n_max.")
    skip: bool = Field(False, description="(c) Skip prompts confidently all-correct (no rollouts this step), each "
                       "revisited with probability 'revisit'.")
    skip_tau: float = Field(0.9, gt=0.0, lt=1.0, description="(c) Skip when P(p > skip_tau) > skip_conf.")
    skip_conf: float = Field(0.9, gt=0.0, lt=1.0, description="(c) Confidence for skipping (see skip_tau).")
    revisit: float = Field(0.2, ge=0.0, le=1.0, description="(c) Probability that a skippable prompt is sampled "
                           "anyway (seeded by run seed, step and prompt id).")
    give_up: bool = Field(False, description="(d) No rescue rounds for prompts confidently hopeless (still explored), "
                          "each rescued anyway with probability hope_revisit; their rescue share is not spent.")
    hope_tau: float = Field(0.05, gt=0.0, lt=1.0, description="(d) Hopeless when P(p > hope_tau) < 1 - hope_conf "
                            "under the prompt's posterior (Beta(1, 1) after 0/32: 0.18 at 0.05).")
    hope_conf: float = Field(0.8, gt=0.0, lt=1.0, description="(d) Confidence for 'hopeless' (see hope_tau).")
    hope_visits: int = Field(2, ge=1, le=1_000_000, description="(d) Give up only after the prompt was sampled in at least this "
                             "many steps (observed epochs), so one failed rescue is not enough.")
    hope_revisit: float = Field(0.1, ge=0.0, le=1.0, description="(d) Probability that a hopeless prompt is rescued "
                                "anyway (seeded by run seed, step and prompt id, independent of (c)'s draws).")
    give_up_floor: bool = Field(False, description="(d) Explore given-up prompts with n_explore_min rollouts instead "
                                "of their usual exploration size.")


class DAPOConfig(_Strict):
    """DAPO (Yu et al. 2025): clip-higher, token-level loss, overlong shaping, dynamic sampling."""

    eps_low: float = Field(0.2, gt=0.0, lt=1.0, description="Lower clip range (DAPO: 0.2).")
    eps_high: float = Field(0.28, gt=0.0, description="Upper clip range, 'clip-higher' (DAPO: 0.28).")
    dynamic_sampling: bool = Field(True, description="Drop zero-variance groups and sample more prompt batches.")
    max_gen_rounds: int = Field(
        1,
        ge=1,
        description="Cap on prompt batches generated per step. 1 = the same rollout budget as GRPO (default, for "
        "equal-budget comparisons); DAPO's paper keeps sampling (e.g. 3). When the cap is hit the step trains on the "
        "groups it has and counts it.",
    )
    overlong_buffer: int = Field(4, ge=0, le=1_048_576, description="Soft overlong punishment buffer L_cache in tokens (0 = off).")
    overlong_penalty: float = Field(1.0, ge=0.0, description="Maximum overlong penalty subtracted from the reward.")


_OPERATOR_FIELDS = {"network": ("AERO_SANDBOX_ISOLATION", "auto"), "run_as_uid": ("AERO_SANDBOX_UID", 65534),
                    "python": ("AERO_SANDBOX_PYTHON", None)}


class CodeConfig(_Strict):
    """Code task: the sandbox that runs candidate programs (docs/tasks.md "Code").

    The paper gives no sandbox limits; the defaults follow common APPS/TACO/PRIME practice
    (a few seconds per test, ~1 GiB)."""

    test_timeout_s: float = Field(4.0, gt=0.0, le=600.0, description="Per test: wall-clock limit (the test's process "
                                  "is killed) and CPU-time limit (RLIMIT_CPU, rounded up to whole seconds). After a "
                                  "timeout the candidate's remaining tests are skipped (counted as failed).")
    timeout_s: float = Field(30.0, gt=0.0, le=3600.0, description="Wall-clock limit for one candidate over all its "
                             "tests, start-up included; past it the whole sandbox (process group / PID namespace) is "
                             "SIGKILLed and the candidate scores 0 as a timeout.")
    memory_mb: int = Field(1024, ge=64, le=1_048_576, description="Address-space limit per process (RLIMIT_AS), MiB.")
    max_processes: int = Field(64, ge=2, le=100_000, description="RLIMIT_NPROC: processes and threads of the sandbox "
                               "user (counted per uid; a root worker gives each candidate scored at once its own uid "
                               "from AERO_SANDBOX_UID / AERO_SANDBOX_UID_COUNT).")
    max_output_bytes: int = Field(1_048_576, ge=1024, le=1 << 30, description="Cap on a test's captured stdout (the "
                                  "process is killed past it) and on any file it writes (RLIMIT_FSIZE).")
    audit_hook: Literal["always", "fallback"] = Field(
        "always", description="Install the audit hook (blocks sockets, subprocesses, ctypes, writes outside the "
        "sandbox directory) always, or only when namespaces are unavailable ('fallback' needs the operator's "
        "AERO_SANDBOX_AUDIT_HOOK=fallback).")
    # Operator settings (trainer/policy.py), no longer run-config fields: a stored config from
    # before may still carry the old defaults, which are accepted and ignored; anything else is
    # refused. Hidden from the schema and never stored.
    network: SkipJsonSchema[Any] = Field(None, exclude=True, description="Operator setting AERO_SANDBOX_ISOLATION.")
    run_as_uid: SkipJsonSchema[Any] = Field(None, exclude=True, description="Operator setting AERO_SANDBOX_UID.")
    python: SkipJsonSchema[Any] = Field(None, exclude=True, description="Operator setting AERO_SANDBOX_PYTHON.")

    @field_validator("network", "run_as_uid", "python", mode="before")
    @classmethod
    def _operator_only(cls, v: Any, info: ValidationInfo) -> None:
        env, legacy = _OPERATOR_FIELDS[info.field_name]
        if v is not None and not (type(v) is type(legacy) and v == legacy):
            raise ValueError(f"an operator setting ({env}), not a run-config field; remove it")
        return None

    workers: int = Field(0, ge=0, le=1024, description="Sandboxes run at once when scoring a batch (0 = min(8, CPUs)).")
    max_tests: int = Field(0, ge=0, le=1_000_000, description="Keep the first N tests of each problem (0 = all).")


class OptimConfig(_Strict):
    lr: float = Field(1e-4, gt=0.0, description="AdamW learning rate. Paper: 5e-6 for 1.5B-7B models. Tiny preset: 1e-4 "
                      "(chosen by the sweep in BENCHMARKS.md; set ~5e-6 for a real model).")
    warmup_ratio: float = Field(0.03, ge=0.0, lt=1.0, description="Linear warmup as a fraction of the run's optimizer steps "
                                "(paper: 0.03). Used when warmup_steps is null.")
    warmup_steps: int | None = Field(10, ge=0, le=1_000_000, description="Linear warmup length in training steps; replaces "
                                     "warmup_ratio when set (tiny preset: 10, as 0.03 of a 60-step run is 2 steps; null = "
                                     "use warmup_ratio, the paper's rule).")
    grad_clip: float = Field(1.0, gt=0.0, description="Gradient-norm clipping (paper: 1.0).")
    weight_decay: float = Field(0.0, ge=0.0)
    beta1: float = Field(0.9, ge=0.0, lt=1.0)
    beta2: float = Field(0.999, ge=0.0, lt=1.0)


class RunConfig(_Strict):
    """One training run. Stored with the run as JSON (``model_dump(mode='json')``)."""

    name: Annotated[str, AfterValidator(no_control_chars)] | None = Field(None, max_length=200)
    method: Method = Field("aero", description=" | ".join(f"{s.name} ({s.description})" for s in specs()) + ".")
    engine: Literal["embedded", "verl"] = "embedded"
    preset: Literal["tiny"] | None = Field("tiny", description="Embedded preset: the shipped ~1M-parameter policy on the synthetic arithmetic task.")
    model_path: str | None = Field(None, description="Local Hugging Face model directory (used instead of a preset).")
    task: Literal["arithmetic", "math", "code"] = "arithmetic"
    train_data: str | None = Field(None, description="Math and code tasks: local verl parquet or JSONL file (code: "
                                   "also APPS/TACO, CodeContests, PRIME/Eurus, MBPP/HumanEval layouts).")
    benchmarks: dict[str, str] = Field(
        default_factory=dict,
        description="Math and code tasks: held-out benchmarks as {name: local parquet/JSONL/JSON file}, e.g. "
        "{'MATH-500': '/data/math500.jsonl', 'AIME24': '/data/aime24.parquet'} or {'APPS': '/data/apps.jsonl', "
        "'CodeContests': '/data/cc.parquet', 'TACO': '/data/taco.jsonl'}; evaluated and reported per name, "
        "in the given order. Flat layouts of AIME24, AMC23, MATH-500, Minerva and OlympiadBench are read as shipped.",
    )
    rollout_engine: Literal["embedded", "vllm"] = Field(
        "embedded", description="Rollout engine of the embedded trainer: 'embedded' (transformers KV-cache sampling, "
        "CPU or CUDA) or 'vllm' (extra aero-lab[vllm], CUDA; weights synced after every update). Without vLLM or "
        "CUDA a 'vllm' run falls back to 'embedded' with a warning. On the verl engine: 'embedded' is the same "
        "sampler as an HF-generate rollout server (CPU or CUDA), 'vllm' is verl's vLLM replica (CUDA).")
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass (HF gradient checkpointing): less memory for "
        "long responses on real models, ~30% more train time. The verl engine maps it to enable_gradient_checkpointing.")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Run seed: sampling, curation and data order.")
    steps: int = Field(60, ge=1, le=1_000_000)
    batch_prompts: int = Field(64, ge=1, le=65_536, description="Prompts per step P (paper: 256; tiny preset: 64, chosen by "
                               "the sweep in BENCHMARKS.md).")
    n_total: int = Field(16, ge=2, le=4096, description="Rollout budget per prompt, the same for every method (paper: 16).")
    temperature: float = Field(1.0, gt=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(12, ge=1, description="Response length cap (paper: 1536; tiny preset: 12).")
    max_prompt_tokens: int = Field(32, ge=1, description="Prompt length cap (paper: 1024; tiny preset: 32).")
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
    eval_every: int = Field(5, ge=0, le=1_000_000, description="Evaluate every K steps, and at step 0 (the base) and the end (0 = only "
                            "at the end). Evaluation time is not counted in a run's training time.")
    eval_n: int = Field(8, ge=1, le=1024, description="Samples per eval problem (Avg@k / Pass@k with k <= eval_n).")
    eval_temperature: float = Field(1.0, ge=0.0, le=10.0, description="Sampling temperature of held-out evaluation, "
                                    "independent of the training temperature (paper: 1.0, Table 9; 0 = greedy). Eval "
                                    "draws are seeded by the eval's step only, so every run of the same base is "
                                    "evaluated on paired draws.")
    eval_problems: int = Field(64, ge=1, description="Problems per benchmark at eval.")
    checkpoint_every: int = Field(20, ge=0, le=1_000_000, description="Checkpoint every K steps (0 = only at the end).")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description="auto: bfloat16 on CUDA, float32 on CPU. On CUDA, "
                                                             "bfloat16 is bf16 compute (autocast) over float32 master weights, so small "
                                                             "updates (lr 5e-6) are not rounded away; on CPU it stores the weights in bf16.")
    verifier_timeout_s: float = Field(5.0, gt=0.0, le=600.0)
    aero: AEROConfig = Field(default_factory=AEROConfig)
    aero_mem: AEROMemConfig = Field(default_factory=AEROMemConfig)
    dapo: DAPOConfig = Field(default_factory=DAPOConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    code: CodeConfig = Field(default_factory=CodeConfig)

    @property
    def effective_loss_agg(self) -> str:
        """``loss_agg`` when set, else the method's default (trainer/methods/)."""
        if self.loss_agg is not None:
            return self.loss_agg
        return get_method(self.method).loss_agg

    @property
    def strategies(self) -> tuple[bool, bool, bool]:
        """Which AERO strategies (S1 rescue, S2 Bayesian, S3 rejection sampling) are on (the method's spec)."""
        return get_method(self.method).strategies


class ConfigError(ValueError):
    """A config that cannot run. ``issues`` is a list of (dotted field path, message)."""

    def __init__(self, issues: list[tuple[str, str]]):
        self.issues = issues
        super().__init__("; ".join(f"{loc}: {msg}" for loc, msg in issues))


def cross_field_issues(cfg: RunConfig) -> list[tuple[str, str]]:
    """Rules that span fields. Each names the field a user should change."""
    a, issues = cfg.aero, []
    if a.n_explore > cfg.n_total:
        issues.append(("aero.n_explore", f"must be <= n_total ({cfg.n_total}); got {a.n_explore}"))
    if a.n_max < a.n_explore:
        issues.append(("aero.n_max", f"must be >= aero.n_explore ({a.n_explore}); got {a.n_max}"))
    if a.S * 2 > a.n_explore:
        issues.append(("aero.S", f"must be in [0, n_explore/2] (paper §4.2.1); got {a.S} with n_explore {a.n_explore}"))
    if a.k < 1:
        issues.append(("aero.k", f"must be >= 1 (a 1:k positive:negative mix); got {a.k}"))
    if a.alpha0 <= 0:
        issues.append(("aero.alpha0", f"must be > 0 (Beta prior); got {a.alpha0}"))
    if a.beta0 <= 0:
        issues.append(("aero.beta0", f"must be > 0 (Beta prior); got {a.beta0}"))
    if cfg.dapo.eps_high < cfg.dapo.eps_low:
        issues.append(("dapo.eps_high", f"must be >= dapo.eps_low ({cfg.dapo.eps_low})"))
    if cfg.dapo.overlong_buffer >= cfg.max_new_tokens:
        issues.append(("dapo.overlong_buffer", f"must be < max_new_tokens ({cfg.max_new_tokens})"))
    if (cfg.preset is None) == (cfg.model_path is None):
        issues.append(("model_path", "give exactly one of preset or model_path"))
    if cfg.task in ("math", "code") and not cfg.train_data:
        issues.append(("train_data", f"the {cfg.task} task needs a local parquet or JSONL file"))
    if cfg.code.timeout_s < cfg.code.test_timeout_s:
        issues.append(("code.timeout_s", f"must be >= code.test_timeout_s ({cfg.code.test_timeout_s})"))
    if cfg.preset == "tiny" and cfg.task != "arithmetic":
        issues.append(("task", "the tiny preset is trained on the arithmetic task"))
    if cfg.mini_batches > cfg.batch_prompts:
        issues.append(("mini_batches", f"must be <= batch_prompts ({cfg.batch_prompts})"))
    if cfg.benchmarks and cfg.task not in ("math", "code"):
        issues.append(("benchmarks", "benchmark files are for the math and code tasks; the arithmetic task has its own "
                       "held-out sets"))
    for name, path in cfg.benchmarks.items():
        if not name.strip() or not str(path).strip():
            issues.append(("benchmarks", f"each benchmark needs a name and a local file path; got {name!r}: {path!r}"))
    if cfg.engine == "verl":
        issues += verl_issues(cfg)
    issues += method_issues(cfg)
    if cfg.train_size is not None and cfg.task != "arithmetic":
        issues.append(("train_size", f"a finite training set is an arithmetic-task option; the {cfg.task} task "
                       "trains on its file"))
    return issues


def method_issues(cfg: RunConfig) -> list[tuple[str, str]]:
    """What the method's spec asks of the run (trainer/methods/spec.py): an engine that can run
    it, and stable prompt ids (on the arithmetic task, a finite ``train_size``), so a run that
    would fail at its first step is refused before any compute."""
    spec, issues = get_method(cfg.method), []
    if cfg.engine not in spec.engines:
        issues.append(("engine", f"method {cfg.method} runs on the {' or '.join(spec.engines)} engine; got {cfg.engine}"))
    if spec.needs_prompt_ids and cfg.task == "arithmetic" and cfg.train_size is None:
        issues.append(("train_size", f"method {cfg.method} keys its memory by prompt id: set train_size (a finite "
                       "arithmetic training set drawn in epochs)"))
    return issues


def verl_issues(cfg: RunConfig) -> list[tuple[str, str]]:
    """The verl engine's own rules, checked here so the API refuses them at submit instead of
    the worker failing later. Whether ``model_path`` holds a model is the worker's check
    (trainer/verl/runner.py): the API never says whether a path exists."""
    issues = []
    if cfg.task == "code":
        issues.append(("task", "the verl engine trains the arithmetic task (tiny preset) or the math task "
                       "(a local HF model + math data); code runs on the embedded engine"))
    if cfg.preset is not None and cfg.task != "arithmetic":
        issues.append(("task", f"the tiny preset trains the arithmetic task; got {cfg.task}"))
    if cfg.model_path is not None and cfg.task == "arithmetic":
        issues.append(("task", "a model_path run on verl trains the math task (the arithmetic task's tokenizer "
                       "ships with the tiny preset)"))
    if cfg.mini_batches <= cfg.batch_prompts and cfg.batch_prompts % cfg.mini_batches:
        issues.append(("mini_batches", f"batch_prompts ({cfg.batch_prompts}) must be a multiple of mini_batches "
                       f"on verl; got {cfg.mini_batches}"))
    if not cfg.std_unbiased and get_method(cfg.method).verl.stock_fit and get_method(cfg.method).divides_by_std(cfg):
        issues.append(("std_unbiased", f"method {cfg.method} runs verl's own GRPO estimator on verl, which divides by "
                       "the Bessel-corrected group std; keep std_unbiased=true (or train it on the embedded engine)"))
    if cfg.device == "cpu" and cfg.rollout_engine == "vllm":
        issues.append(("rollout_engine", "vLLM needs CUDA; on the CPU the verl engine rolls out with 'embedded' "
                       "(docs/engines.md)"))
    return issues


def parse_run_config(data: dict[str, Any] | RunConfig, policy: RunPolicy | None = None) -> RunConfig:
    """Validate untrusted input into a RunConfig, or raise ConfigError naming every bad field.
    With the operator's ``policy`` (trainer/policy.py), also its caps and data roots."""
    if isinstance(data, RunConfig):
        data = data.model_dump()
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError([(".".join(str(p) for p in err["loc"]) or "config", err["msg"]) for err in e.errors()]) from None
    issues = cross_field_issues(cfg)
    if policy is not None:
        from trainer.policy import policy_issues

        issues += policy_issues(cfg, policy)
    if issues:
        raise ConfigError(issues)
    return cfg
