"""What a method's spec asks of a run config (engines, stable prompt ids) is checked at parse
time by trainer.spec.config's method rule, so a run that would fail at its first step is refused
before any compute, naming the field to change."""

import pytest

from trainer.spec.config import ConfigError, parse_run_config
from trainer.methods.spec import get_method, specs

MEM = [s.name for s in specs() if s.needs.prompt_ids]


def _issues(**cfg) -> list[tuple[str, str]]:
    try:
        parse_run_config({"steps": 3, "batch_prompts": 4, **cfg})
    except ConfigError as e:
        return e.issues
    return []


def test_the_memory_methods_declare_their_needs():
    assert {"aero-mem", "aero-mem-a", "aero-mem-b", "aero-mem-c", "aero-mem-d", "aero-mem-abd"} <= set(MEM)
    assert all(get_method(m).needs.engines == ("embedded", "verl") and get_method(m).needs.prompt_ids for m in MEM)
    assert get_method("aero").needs.engines == ("embedded", "verl") and not get_method("aero").needs.prompt_ids


@pytest.mark.parametrize("method", MEM)
def test_memory_methods_need_train_size_on_arithmetic(method):
    issues = _issues(method=method)
    assert [loc for loc, _ in issues] == ["train_size"] and method in issues[0][1]
    assert _issues(method=method, train_size=256) == []


def test_memory_methods_run_on_verl_with_the_same_rules():
    """verl's sampler has prompt ids and state too (trainer/verl/collect.py), so the memory
    methods run there; the stable-id rule is the same on both engines."""
    on_math = _issues(method="aero-mem", engine="verl", preset=None, model_path="/models/qwen", task="math",
                      train_data="/data/train.parquet")
    assert "engine" not in [loc for loc, _ in on_math]
    assert [loc for loc, _ in _issues(method="aero-mem", engine="verl", shuffle_mini_batches=False)] == ["train_size"]
    assert _issues(method="aero-mem", engine="verl", shuffle_mini_batches=False, train_size=64) == []


def test_math_task_has_ids_without_train_size():
    issues = _issues(method="aero-mem", preset=None, model_path="/models/qwen", task="math", train_data="/d.jsonl")
    assert "train_size" not in [loc for loc, _ in issues]


def test_give_up_options_are_validated():
    assert [loc for loc, _ in _issues(method="aero-mem-d", train_size=64, aero_mem={"hope_visits": 0})] == [
        "aero_mem.hope_visits"]
    assert [loc for loc, _ in _issues(method="aero-mem-d", train_size=64, aero_mem={"hope_tau": 1.0})] == [
        "aero_mem.hope_tau"]


def test_a_method_that_says_nothing_of_verl_is_refused_there_not_trained_as_grpo(monkeypatch):
    """The trap this guards: with stock_fit on by default and both engines by default, a new
    method that forgot its verl settings trained verl's stock GRPO under its own name. Now the
    defaults are the embedded engine only and the curated loop (the method's own step)."""
    from trainer.spec.config_rules import method_issues
    from trainer.methods import spec as registry
    from trainer.methods.grpo import grpo_step

    throwaway = registry.MethodSpec(name="throwaway", family="throwaway",
                                    display=registry.Display("Throwaway", "#000000", "a test's method", order=999))
    assert throwaway.needs.engines == ("embedded",) and throwaway.verl.stock_fit is False
    monkeypatch.setitem(registry._REGISTRY, "throwaway", (throwaway, grpo_step))
    on_verl = parse_run_config({"method": "grpo", "engine": "verl", "preset": None, "model_path": "/models/qwen",
                                "task": "math", "train_data": "/data/train.parquet"})
    issues = method_issues(on_verl.model_copy(update={"method": "throwaway"}))
    assert issues == [("engine", "method throwaway runs on the embedded engine; got verl")]
    on_embedded = parse_run_config({"method": "grpo"}).model_copy(update={"method": "throwaway"})
    assert method_issues(on_embedded) == []
    # only the methods that are exactly verl's GRPO opt in to its own fit
    assert {s.name for s in registry.specs() if s.verl.stock_fit} == {"grpo", "drgrpo"}
