"""CPPO (trainer/methods/cppo.py): the pruning rule by hand, the step against GRPO's on the
same fake engine (trainer/methods/conftest.py), its config section and rule, and two real steps
on the embedded engine."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.spec.config import ConfigError, parse_run_config
from trainer.methods.cppo import kept_per_group, prune_by_abs_advantage
from trainer.methods.spec import get_method, get_step


def test_pruning_keeps_the_largest_absolute_advantages_per_group_ties_in_order():
    adv = np.array([0.1, -0.9, 0.5, -0.5, 2.0, 0.0, 0.0, -0.3])
    group = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    assert prune_by_abs_advantage(adv, group, 2).tolist() == [False, True, True, False, True, False, False, True]
    assert prune_by_abs_advantage(np.zeros(4), np.zeros(4, dtype=int), 1).tolist() == [True, False, False, False]


@pytest.mark.parametrize("rate,k", [(0.0, 16), (0.5, 8), (0.75, 4), (0.875, 2), (0.9375, 1)])
def test_kept_rows_follow_the_papers_table(rate, k):
    assert kept_per_group(parse_run_config({"method": "cppo", "cppo": {"prune_rate": rate}})) == k


@pytest.mark.parametrize("seed", range(4))
def test_step_trains_grpos_advantages_on_the_top_k_rows(seed, fake_sampler):
    cfg = parse_run_config({"method": "cppo", "batch_prompts": 6, "n_total": 8, "cppo": {"prune_rate": 0.75}})
    grpo = get_step("grpo")(parse_run_config({"method": "grpo", "batch_prompts": 6, "n_total": 8}), fake_sampler(6, seed))
    res = get_step("cppo")(cfg, fake_sampler(6, seed), None)
    assert np.bincount(res.group, minlength=6).tolist() == [2] * 6 and res.generated == grpo.generated == 48
    full = dict(zip(grpo.rows.tolist(), grpo.advantages.tolist()))  # GRPO's advantage of every row
    assert res.advantages.tolist() == [full[r] for r in res.rows.tolist()]  # over the whole group, not the kept rows
    for g in range(6):
        theirs = np.abs(grpo.advantages[grpo.group == g])
        assert sorted(np.abs(res.advantages[res.group == g]).tolist()) == sorted(theirs)[-2:]
    assert res.stats["cppo/pruned"] == 36


def test_no_pruning_is_grpo(fake_sampler):
    cfg = parse_run_config({"method": "cppo", "batch_prompts": 5, "n_total": 4, "cppo": {"prune_rate": 0.0}})
    a = get_step("cppo")(cfg, fake_sampler(5, 1), None)
    b = get_step("grpo")(parse_run_config({"method": "grpo", "batch_prompts": 5, "n_total": 4}), fake_sampler(5, 1))
    assert a.rows.tolist() == b.rows.tolist() and np.array_equal(a.advantages, b.advantages)


def test_the_section_belongs_to_cppo_and_its_rule_names_the_field():
    assert parse_run_config({"method": "cppo"}).cppo.prune_rate == 0.5
    assert "cppo" not in parse_run_config({"method": "aero"}).model_dump()
    with pytest.raises(ConfigError) as e:
        parse_run_config({"method": "grpo", "cppo": {"prune_rate": 0.5}})
    assert [loc for loc, _ in e.value.issues] == ["cppo"]
    with pytest.raises(ConfigError) as e:
        parse_run_config({"method": "cppo", "n_total": 4, "cppo": {"prune_rate": 0.8}})
    assert e.value.issues[0][0] == "cppo.prune_rate" and "at most 0.75" in e.value.issues[0][1]
    spec = get_method("cppo").to_json()
    assert spec["sections"] == [{"name": "cppo", "title": "CPPO (completion pruning)",
                                 "form": [["cppo.prune_rate", "pruning rate P"]]}]


def test_two_real_steps_on_the_embedded_engine(tmp_path):
    from trainer.platform.run import run_training
    from trainer.platform.sinks import MemorySink

    cfg = parse_run_config({"method": "cppo", "steps": 2, "batch_prompts": 8, "n_total": 8, "eval_every": 0,
                            "eval_problems": 8, "checkpoint_every": 0, "cppo": {"prune_rate": 0.75}})
    sink = MemorySink()
    run_training(cfg, tmp_path, sink)
    for m in sink.steps.values():
        assert (m["rollout/generated"], m["rollout/trained"], m["cppo/pruned"]) == (64, 16, 48)
        assert m["flops/train"] > 0
