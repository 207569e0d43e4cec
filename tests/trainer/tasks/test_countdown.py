"""Countdown: the strict verifier (no eval of untrusted text), the generator and the stream."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from trainer.tasks.base import Problem
from trainer.tasks.countdown import (LEVELS, MAX_DEPTH, CountdownTask, EquationError, make_problem, parse_equation,
                                     parse_prompt, score_countdown, score_problem)
from trainer.tasks.generated import hash_words


@pytest.mark.parametrize("text,value,used", [
    ("3*7+9", 30, [3, 7, 9]), ("(9-3)*(7+2)", 54, [9, 3, 7, 2]), ("8/(3-1)", 4, [8, 3, 1]),
    (" 7 + 2 ", 9, [7, 2]), ("7/2", Fraction(7, 2), [7, 2]), ("((5))", 5, [5]), ("10-2-3", 5, [10, 2, 3]),
    ("12/2/3", 2, [12, 2, 3]), ("2*3+4*5", 26, [2, 3, 4, 5]), ("0", 0, [0]),
])
def test_parse_equation_evaluates_with_precedence_and_exact_rationals(text, value, used):
    assert parse_equation(text) == (value, used)


@pytest.mark.parametrize("text", [
    "", "3+", "*3", "(3+4", "3+4)", "3 4", "-3+5", "03+4", "3^2", "3**2", "__import__('os')", "3+4=7",
    "1/0", "5/(2-2)", "()", "3+()", "１+2", "2" + "+1" * 40, "(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1),
])
def test_parse_equation_refuses_anything_else(text):
    with pytest.raises(EquationError):
        parse_equation(text)


def test_score_counts_each_number_at_most_once_and_not_all_must_be_used():
    nums = [3, 7, 9]
    assert score_countdown("3*7+9", nums, 30) == 1.0
    assert score_countdown("3*9+3", nums, 30) == 0.0  # 3 used twice
    assert score_countdown("7+9", nums, 16) == 1.0  # a subset is allowed
    assert score_countdown("37-7", nums, 30) == 0.0  # 37 is not a given number (digits may not be glued)
    assert score_countdown("3*7+9", nums, 31) == 0.0
    assert score_countdown("9/3*7+9", nums, 30) == 0.0
    assert score_countdown("not an equation", nums, 30) == 0.0
    assert score_countdown("7/2*2", [7, 2, 2], 7) == 1.0  # exact rationals, no integer rounding
    assert score_countdown("7/2*2", [7, 2], 7) == 0.0
    assert score_problem("3*7+9", Problem("3 7 9>30:", "9+3*7")) == 1.0 and parse_prompt("3 7 9>30:") == ([3, 7, 9], 30)


def test_every_generated_reference_answer_is_right_and_fits_the_tiny_budget():
    task = CountdownTask(ood_levels=("OOD-C3big",))
    problems = task.train_problems(0, 3000, seed=5) + [p for v in task.benchmarks().values() for p in v]
    for p in problems:
        assert task.score(p.answer, p) == 1.0, p
        numbers, target = parse_prompt(p.prompt)
        assert len(numbers) == task.all_levels()[p.source].count and target >= 1
        assert len(task.answer_ids(p)) <= 12 and len(task.encode_prompt(p)) <= 32
    assert {p.source for p in problems} == {"C2", "C3", "C4", "OOD-C3big"}


def test_reference_rendering_round_trips_on_random_draws():
    rng = random.Random(0)
    for _ in range(2000):
        level = LEVELS[rng.choice(list(LEVELS))]
        words = [rng.getrandbits(64) for _ in range(3)]
        p = make_problem(level, words)
        value, used = parse_equation(p.answer)
        assert value == parse_prompt(p.prompt)[1] and sorted(used) == sorted(parse_prompt(p.prompt)[0])


def test_streams_are_pure_functions_of_seed_and_index_and_hold_out_benchmarks():
    task = CountdownTask()
    a = task.train_problems(0, 40, seed=1)
    assert a == task.train_problems(0, 20, seed=1) + task.train_problems(20, 20, seed=1)
    assert a != task.train_problems(0, 40, seed=2)
    held = {p.prompt for name in ("C3", "C4") for p in task.benchmarks()[name]}
    assert not held & {p.prompt for p in task.train_problems(0, 5000, seed=0)}
    finite = CountdownTask(train_size=50)
    epoch = finite.train_problems(0, 50, seed=3)
    assert sorted(p.meta["where"] for p in epoch) == sorted(f"item {j}" for j in range(50))
    assert hash_words("x", 0, 0, 0) != hash_words("x", 0, 1, 0)


def test_the_warm_start_mix_and_level_weights_are_checked():
    task = CountdownTask(level_weights={"C4": 1.0})
    assert {p.source for p in task.train_problems(0, 50, 0)} == {"C4"}
    with pytest.raises(ValueError, match="unknown level"):
        CountdownTask(level_weights={"L1-add1": 1.0})
    with pytest.raises(ValueError, match="ood_levels"):
        CountdownTask(ood_levels=("OOD-add4",))
