import operator
import re

import pytest

from trainer.tasks import TASKS, make_task
from trainer.tasks.arithmetic import ALL_LEVELS, LEVELS, WARM_START_WEIGHTS, ArithmeticTask, score_exact
from trainer.tasks.base import Problem

_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def _solve(prompt: str) -> int:
    """Independent oracle: evaluate 'a op b (op c)=' left to right."""
    assert prompt.endswith("=")
    tokens = re.findall(r"\d+|[+\-*]", prompt[:-1])
    value = int(tokens[0])
    for op, x in zip(tokens[1::2], tokens[2::2]):
        value = _OPS[op](value, int(x))
    return value


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask()


def test_stream_is_deterministic_and_resumable(task):
    a = task.train_problems(0, 20, seed=3)
    assert a == ArithmeticTask().train_problems(0, 20, seed=3)
    assert a == task.train_problems(0, 10, seed=3) + task.train_problems(10, 10, seed=3)
    assert task.train_problems(7, 1, seed=3) == [a[7]]
    assert a != task.train_problems(0, 20, seed=4)


def test_answers_are_exact_and_levels_respect_their_ranges(task):
    for p in task.train_problems(0, 600, seed=0):
        assert p.answer == str(_solve(p.prompt))
        a, b = map(int, re.findall(r"\d+", p.prompt))
        lo_a, hi_a = LEVELS[p.source].ranges[0]
        lo_b, hi_b = LEVELS[p.source].ranges[1]
        if p.source == "L3-sub2":
            assert a >= b and 10 <= b <= a <= 99
        else:
            assert lo_a <= a <= hi_a and lo_b <= b <= hi_b


def test_default_mix_is_uniform_over_six_levels(task):
    sources = [p.source for p in task.train_problems(0, 3000, seed=1)]
    for name in LEVELS:
        assert 400 < sources.count(name) < 600  # expected 500, sd ~20
    assert not any(s.startswith("OOD") for s in sources)


def test_level_weights_select_levels():
    only = ArithmeticTask(level_weights={"L6-mul2x2": 1.0, "L1-add1": 0.0})
    assert {p.source for p in only.train_problems(0, 50, seed=0)} == {"L6-mul2x2"}
    a = ArithmeticTask(level_weights={"L2-add2": 1, "L5-mul2x1": 3}).train_problems(0, 30, 0)
    assert a == ArithmeticTask(level_weights={"L5-mul2x1": 3, "L2-add2": 1}).train_problems(0, 30, 0)
    assert 15 < sum(p.source == "L5-mul2x1" for p in a) < 30
    with pytest.raises(ValueError, match="L9"):
        ArithmeticTask(level_weights={"L9": 1.0})
    with pytest.raises(ValueError, match="positive sum"):
        ArithmeticTask(level_weights={"L1-add1": 0.0})


def test_benchmarks_are_fixed_ordered_distinct_and_correct(task):
    bench = task.benchmarks()
    assert list(bench) == ["L1-add1", "L2-add2", "L3-sub2", "L4-add3", "L5-mul2x1", "L6-mul2x2", "OOD-add4"]
    for name, problems in bench.items():
        assert len(problems) == 64 and len({p.prompt for p in problems}) == 64
        assert all(p.source == name and p.answer == str(_solve(p.prompt)) for p in problems)
    # Pinned: the benchmark must not drift between versions (hash-based, not RNG-based).
    assert (bench["L2-add2"][0].prompt, bench["L2-add2"][0].answer) == ("53+69=", "122")
    assert (bench["OOD-add4"][0].prompt, bench["OOD-add4"][0].answer) == ("4345+1787=", "6132")
    assert bench == ArithmeticTask().benchmarks()


def test_benchmark_sets_are_prefix_stable_and_ood_configurable():
    small = ArithmeticTask(benchmark_size=16, ood_levels=("OOD-add4", "OOD-sum3")).benchmarks()
    big = ArithmeticTask().benchmarks()
    assert [p.prompt for p in small["L4-add3"]] == [p.prompt for p in big["L4-add3"][:16]]
    assert re.fullmatch(r"\d\d\+\d\d\+\d\d=", small["OOD-sum3"][0].prompt)


def test_training_stream_never_contains_held_out_problems(task):
    bench = task.benchmarks()
    held = {p.prompt for name, ps in bench.items() if name != "L1-add1" for p in ps}
    train = task.train_problems(0, 20000, seed=0) + [
        ArithmeticTask(level_weights={"L5-mul2x1": 1}).train_problems(0, 3000, seed=0)
    ][0]
    assert not held & {p.prompt for p in train}
    # L1 has only 100 problems: it is not held out, so its benchmark overlaps training.
    assert {p.prompt for p in bench["L1-add1"]} & {p.prompt for p in train}
    # Holdout does not depend on the eval size.
    assert ArithmeticTask(benchmark_size=8).train_problems(0, 50, 0) == task.train_problems(0, 50, 0)


def test_exact_match_scoring_edge_cases():
    p = Problem("37+85=", "122")
    assert score_exact("122", p.answer) == 1.0
    assert score_exact("  122 ", p.answer) == 1.0
    assert score_exact("123", p.answer) == 0.0
    assert score_exact("", p.answer) == 0.0
    assert score_exact("1220", p.answer) == 0.0
    assert score_exact("0122", p.answer) == 0.0
    assert score_exact("+122", p.answer) == 0.0
    assert score_exact("12 2", p.answer) == 0.0
    assert ArithmeticTask().score("122", p) == 1.0


def test_prompt_and_answer_ids_fit_the_tiny_preset(task):
    tok = task.tokenizer
    for problems in [task.train_problems(0, 300, 0), *task.benchmarks().values()]:
        for p in problems:
            ids, ans = task.encode_prompt(p), task.answer_ids(p)
            assert ids[0] == tok.bos_id and tok.decode(ids) == p.prompt
            assert ans[-1] == tok.eos_id and tok.decode(ans) == p.answer
            assert len(ids) <= 32 and len(ans) <= 12  # RunConfig max_prompt_tokens / max_new_tokens


def test_sft_examples_are_deterministic_and_weighted(task):
    ex = task.sft_examples(200, seed=0, level_weights=WARM_START_WEIGHTS)
    assert ex == task.sft_examples(100, 0, WARM_START_WEIGHTS) + task.sft_examples(100, 0, WARM_START_WEIGHTS, start=100)
    tok = task.tokenizer
    for prompt_ids, answer_ids in ex:
        assert prompt_ids[0] == tok.bos_id and answer_ids[-1] == tok.eos_id
        assert tok.decode(answer_ids) == str(_solve(tok.decode(prompt_ids)))
    only_l4 = task.sft_examples(20, 0, {"L4-add3": 1})
    assert all(re.fullmatch(r"\d{3}\+\d{3}=", tok.decode(p)) for p, _ in only_l4)
    # The warm-start stream is not the RL stream.
    assert [tok.decode(p) for p, _ in task.sft_examples(20, 0)] != [p.prompt for p in task.train_problems(0, 20, 0)]


def test_registry():
    assert set(TASKS) == {"arithmetic", "countdown", "math", "code", "strata"}
    assert isinstance(make_task("arithmetic", benchmark_size=4), ArithmeticTask)
    with pytest.raises(ValueError, match="unknown task"):
        make_task("chess")
    assert set(ALL_LEVELS) >= set(LEVELS)
