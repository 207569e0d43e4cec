"""Run-config validation: every bad field is refused by name before any compute."""

import pytest

from trainer.spec.config import ConfigError, RunConfig, parse_run_config
from trainer.methods.aero_strategies import AeroStrategies
from trainer.methods.spec import get_method

VERL = {"engine": "verl", "preset": None, "model_path": "/m", "task": "math", "train_data": "/d.jsonl"}
CODE_TASK = {"task": "code", "preset": None, "model_path": "/m", "train_data": "/d.jsonl"}

BAD = [
    ({"aero": {"n_explore": 20}}, "aero.n_explore"),
    ({"aero": {"k": 0.5}}, "aero.k"),
    ({"aero": {"alpha0": 0}}, "aero.alpha0"),
    ({"aero": {"beta0": -1}}, "aero.beta0"),
    ({"aero": {"n_max": 4}}, "aero.n_max"),
    ({"aero": {"S": 5}}, "aero.S"),
    ({"aero": {"tau": 1.5}}, "aero.tau"),
    ({"aero": {"delta_n": 0}}, "aero.delta_n"),
    ({"aero": {"negative_selection": "best"}}, "aero.negative_selection"),
    ({"method": "ppo"}, "method"),
    ({"optim": {"lr": -1e-4}}, "optim.lr"),
    ({"n_total": 1}, "n_total"),
    ({"steps": 0}, "steps"),
    ({"temperature": 0}, "temperature"),
    ({"top_p": 1.5}, "top_p"),
    ({"method": "dapo", "dapo": {"eps_low": 0.3, "eps_high": 0.2}}, "dapo.eps_high"),
    ({"method": "dapo", "dapo": {"overlong_buffer": 12}}, "dapo.overlong_buffer"),
    ({"preset": None}, "model_path"),
    ({"task": "math"}, "train_data"),
    ({"unknown_field": 1}, "unknown_field"),
    ({"aero": {"bogus": 1}}, "aero.bogus"),
    ({"mini_batches": 64, "batch_prompts": 4}, "mini_batches"),
    ({"task": "code", "preset": None, "model_path": "/m"}, "train_data"),
    ({"task": "cobol"}, "task"),
    ({**CODE_TASK, "code": {"timeout_s": 2.0, "test_timeout_s": 4.0}}, "code.timeout_s"),
    ({**CODE_TASK, "code": {"memory_mb": 16}}, "code.memory_mb"),
    ({**CODE_TASK, "code": {"max_processes": 1}}, "code.max_processes"),
    ({**CODE_TASK, "code": {"network": "none"}}, "code.network"),
    ({**CODE_TASK, "code": {"test_timeout_s": 0}}, "code.test_timeout_s"),
    ({**CODE_TASK, "code": {"bogus": 1}}, "code.bogus"),
    # the verl engine's rules (trainer.verl.rules.verl_issues)
    ({"engine": "verl", "method": "aero-mem", "shuffle_mini_batches": False}, "train_size"),  # stable ids on verl too
    ({**VERL, "task": "code"}, "task"),
    ({**VERL, "batch_prompts": 10, "mini_batches": 3}, "mini_batches"),
]


@pytest.mark.parametrize("override,field", BAD, ids=[f for _, f in BAD])
def test_bad_config_names_the_field(override, field):
    with pytest.raises(ConfigError) as err:
        parse_run_config(override)
    assert field in [loc for loc, _ in err.value.issues], err.value.issues


def test_defaults_follow_the_paper():
    cfg = parse_run_config({})
    a = cfg.aero
    assert (cfg.n_total, a.n_explore, a.n_max, a.delta_n, a.k_max, a.tau, a.S, a.k, a.alpha0, a.beta0) == (
        16, 8, 32, 2, 10, 0.5, 0, 1.0, 1.0, 1.0)
    assert (cfg.clip_eps, cfg.entropy_coef, cfg.optim.grad_clip, cfg.optim.warmup_ratio) == (0.2, 1e-3, 1.0, 0.03)
    dapo = parse_run_config({"method": "dapo"}).dapo
    assert (dapo.eps_low, dapo.eps_high) == (0.2, 0.28)


def test_method_defaults_and_strategies():
    assert parse_run_config({"method": "dapo"}).effective_loss_agg == "token-mean"
    assert parse_run_config({"method": "grpo"}).effective_loss_agg == "seq-mean-token-mean"
    strategies = {m: get_method(m).aero for m in ("aero", "aero-s1s2", "aero-s1", "grpo")}
    assert strategies == {"aero": AeroStrategies(True, True, True), "aero-s1s2": AeroStrategies(True, True, False),
                          "aero-s1": AeroStrategies(True, False, False), "grpo": None}


def test_config_round_trips_through_json():
    cfg = parse_run_config({"method": "aero", "aero": {"k": 2}, "seed": 3})
    again = parse_run_config(RunConfig.model_validate_json(cfg.model_dump_json()).model_dump())
    assert again == cfg


def test_code_task_config():
    cfg = parse_run_config({"task": "code", "preset": None, "model_path": "/m", "train_data": "/d/train.jsonl",
                            "benchmarks": {"APPS": "/d/apps.jsonl", "TACO": "/d/taco.parquet"}})
    assert list(cfg.benchmarks) == ["APPS", "TACO"]  # benchmark files are allowed for code as for math
    c = cfg.code
    assert (c.test_timeout_s, c.timeout_s, c.memory_mb, c.audit_hook) == (4.0, 30.0, 1024, "always")
    # isolation, interpreter and uid are the operator's (trainer/spec/operator_policy.py): never stored with a run
    assert not {"network", "python", "run_as_uid"} & set(cfg.model_dump()["code"])
    assert RunConfig.model_validate_json(cfg.model_dump_json()) == cfg
    assert all(f.description for f in type(c).model_fields.values())  # every limit has help text


def test_verl_rules_accept_a_runnable_verl_config():
    cfg = parse_run_config({**VERL, "batch_prompts": 12, "mini_batches": 3, "shuffle_mini_batches": False})
    assert (cfg.engine, cfg.batch_prompts % cfg.mini_batches) == ("verl", 0)
    with pytest.raises(ConfigError) as err:   # verl has no per-epoch reshuffle of the curated rows
        parse_run_config({**VERL, "batch_prompts": 12, "mini_batches": 3})
    assert [loc for loc, _ in err.value.issues] == ["shuffle_mini_batches"]
    with pytest.raises(ConfigError) as err:   # the same numbers are fine on the embedded engine
        parse_run_config({**VERL, "batch_prompts": 10, "mini_batches": 3, "shuffle_mini_batches": False})
    assert [loc for loc, _ in err.value.issues] == ["mini_batches"]
    assert parse_run_config({**VERL, "engine": "embedded", "batch_prompts": 10, "mini_batches": 3}).mini_batches == 3


SHAPE = {"preset": None, "model_shape": "qwen2.5-1.5b", "task": "strata"}


@pytest.mark.parametrize("override,field", [
    ({**SHAPE, "preset": "tiny"}, "preset"),                      # a shape replaces the preset
    ({**SHAPE, "model_path": "/m"}, "model_path"),                # ... and a local model
    ({**SHAPE, "task": "arithmetic"}, "task"),                    # random weights, no tokenizer: strata only
    ({**SHAPE, "engine": "verl"}, "engine"),
    ({**SHAPE, "rollout": {"sampler": "vllm"}}, "rollout.sampler"),  # vLLM loads weights from a directory
    ({**SHAPE, "method": "aero-mem"}, "method"),                  # strata prompts have no stable ids
    ({"preset": None, "model_path": "/m", "task": "strata"}, "model_shape"),
    ({**SHAPE, "model_shape": "llama-70b"}, "model_shape"),
], ids=["preset", "model_path", "task", "engine", "sampler", "method", "strata-needs-shape", "unknown"])
def test_model_shape_rules_name_the_field(override, field):
    with pytest.raises(ConfigError) as err:
        parse_run_config(override)
    assert field in [loc for loc, _ in err.value.issues], err.value.issues


def test_a_shape_on_the_strata_task_is_a_valid_run():
    cfg = parse_run_config({**SHAPE, "batch_prompts": 128, "max_new_tokens": 1536, "max_prompt_tokens": 1024})
    assert (cfg.model_shape, cfg.task, cfg.preset, cfg.model_path) == ("qwen2.5-1.5b", "strata", None, None)
    assert parse_run_config(cfg.model_dump(mode="json")) == cfg  # stored and re-read unchanged


def test_tasks_and_presets_come_from_the_registry_and_name_each_other():
    from trainer.tasks.registry import PRESET_TASK, TASK_NAMES

    assert {"arithmetic", "countdown", "math", "code", "strata"} <= set(TASK_NAMES)
    assert PRESET_TASK == {"tiny": "arithmetic", "tiny-countdown": "countdown", "smollm2-135m": "arithmetic"}
    cfg = parse_run_config({"task": "countdown"})  # the task's shipped preset
    assert (cfg.task, cfg.preset) == ("countdown", "tiny-countdown")
    cfg = parse_run_config({"preset": "tiny-countdown"})  # the preset's task
    assert (cfg.task, cfg.preset) == ("countdown", "tiny-countdown")
    assert (parse_run_config({}).task, parse_run_config({}).preset) == ("arithmetic", "tiny")
    with pytest.raises(ConfigError) as e:
        parse_run_config({"task": "countdown", "preset": "tiny"})
    assert e.value.issues == [("task", "the tiny preset is trained on the arithmetic task; for the countdown task use "
                                       "preset tiny-countdown")]
    with pytest.raises(ConfigError) as e:
        parse_run_config({"task": "math", "preset": "tiny-countdown"})
    assert ("task", "the tiny-countdown preset is trained on the countdown task; for the math task set preset=null "
                    "and give a model_path") in e.value.issues
    with pytest.raises(ConfigError) as e:
        parse_run_config({"task": "sudoku"})
    assert e.value.issues[0][0] == "task" and "countdown" in e.value.issues[0][1]
    # a generated task's options: a finite training set, no benchmark files; on verl with its preset
    assert parse_run_config({"task": "countdown", "train_size": 100}).train_size == 100
    with pytest.raises(ConfigError) as e:
        parse_run_config({"task": "countdown", "benchmarks": {"x": "/d/x.jsonl"}})
    assert e.value.issues[0][0] == "benchmarks" and "the countdown task has its own held-out sets" in e.value.issues[0][1]
    assert parse_run_config({"task": "countdown", "engine": "verl", "method": "grpo"}).engine == "verl"
    with pytest.raises(ConfigError) as e:
        parse_run_config({"task": "countdown", "method": "aero-mem"})
    assert ("train_size", "method aero-mem keys its memory by prompt id: set train_size (a finite countdown training "
                          "set drawn in epochs)") in e.value.issues


def test_a_config_saved_before_the_code_block_moved_still_parses():
    """Configs dumped before the code block became the code task's section carry it whatever
    their task (saved JSON, API responses): holding only the defaults, it is dropped with a
    ConfigDeprecationWarning; with values of its own, it is refused, naming the field."""
    from trainer.spec.config_renames import ConfigDeprecationWarning
    from trainer.tasks.code_config import CodeConfig

    old = {"method": "aero", "task": "countdown", "code": CodeConfig().model_dump()}
    with pytest.warns(ConfigDeprecationWarning, match="the countdown task ignores it"):
        cfg = parse_run_config(old)
    assert cfg.task == "countdown" and "code" not in cfg.model_dump()
    with pytest.raises(ConfigError) as e:
        parse_run_config({**old, "code": {"memory_mb": 512}})
    assert e.value.issues == [("code", "Value error, task countdown has no code section (read by the code task); "
                               "remove it")]
    assert parse_run_config({**CODE_TASK, "code": {"memory_mb": 512}}).code.memory_mb == 512
