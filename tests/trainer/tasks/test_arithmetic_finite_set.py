"""The arithmetic task's finite training set (``train_size``): epochs are seeded
permutations of one fixed set, ids are stable, a data position resumes exactly, and
``train_size=None`` keeps the infinite stream."""

import pytest

from trainer.spec.config import ConfigError, parse_run_config
from trainer.tasks.arithmetic import ArithmeticTask

N = 50


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask(train_size=N)


def _ids(problems):
    return [p.meta["index"] for p in problems]


def test_no_train_size_keeps_the_infinite_stream():
    a, b = ArithmeticTask(), ArithmeticTask(train_size=None)
    assert b.train_problems(0, 300, seed=3) == a.train_problems(0, 300, seed=3)
    assert _ids(b.train_problems(100, 5, seed=3)) == [100, 101, 102, 103, 104]  # the draw index, as before
    assert "where" not in b.train_problems(0, 1, seed=3)[0].meta


def test_each_epoch_is_a_permutation_of_the_same_set(task):
    stream = task.train_problems(0, 3 * N, seed=1)
    epochs = [stream[e * N:(e + 1) * N] for e in range(3)]
    for ep in epochs:
        assert sorted(_ids(ep)) == list(range(N))
    assert _ids(epochs[0]) != _ids(epochs[1]) != _ids(epochs[2])
    # the set is the first N draws of seed 0's infinite stream, whatever the run's seed
    base = ArithmeticTask().train_problems(0, N, seed=0)
    assert sorted(p.prompt for p in epochs[0]) == sorted(p.prompt for p in base)


def test_ids_are_stable_across_epochs_seeds_and_instances(task):
    by_id = {}
    for seed in (0, 1, 7):
        for p in ArithmeticTask(train_size=N).train_problems(0, 2 * N + 7, seed=seed):
            assert p.meta["where"] == f"item {p.meta['index']}"
            by_id.setdefault(p.meta["where"], (p.prompt, p.answer, p.source))
            assert by_id[p.meta["where"]] == (p.prompt, p.answer, p.source)
    assert len(by_id) == N
    assert _ids(task.train_problems(0, N, seed=0)) != _ids(task.train_problems(0, N, seed=1))


def test_resume_at_any_data_position(task):
    full = task.train_problems(0, 3 * N + 11, seed=5)
    for pos in (0, 13, N - 1, N, 2 * N + 3):
        fresh = ArithmeticTask(train_size=N)  # a resumed run builds the task anew
        assert fresh.train_problems(pos, 40, seed=5) == full[pos:pos + 40]
        assert _ids(fresh.train_problems(pos, 40, seed=5)) == _ids(full[pos:pos + 40])
    # interleaved calls for two seeds do not disturb each other (the permutation cache)
    assert task.train_problems(N + 2, 3, seed=9) and task.train_problems(N + 2, 3, seed=5) == full[N + 2:N + 5]


def test_train_size_is_validated():
    with pytest.raises(ValueError):
        ArithmeticTask(train_size=0)
    with pytest.raises(ConfigError) as e:
        parse_run_config({"train_size": 0})
    assert e.value.issues[0][0] == "train_size"
    with pytest.raises(ConfigError) as e:
        parse_run_config({"train_size": 100, "task": "math", "preset": None, "model_path": "/m", "train_data": "/d.jsonl"})
    assert [loc for loc, _ in e.value.issues] == ["train_size"]
    assert parse_run_config({"train_size": 100}).train_size == 100
