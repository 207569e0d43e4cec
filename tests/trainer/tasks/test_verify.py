import json
import threading
import time
from functools import partial

import pytest

from trainer.tasks import scorer_process, verify
from trainer.tasks.arithmetic import ArithmeticTask
from trainer.tasks.base import Problem
from trainer.tasks.math import score_math
from trainer.tasks.verify import resolve_isolation, safe_score, score_batch, stuck_threads

pytestmark = pytest.mark.timing  # wall-clock budgets: `make test` runs these one at a time

P = Problem("1+1=", "2")


class Fake:
    """The Task protocol's scoring members at their "nothing special" values."""

    score_is_safe = False
    isolated_scorer = None
    isolated_preload: tuple[str, ...] = ()
    score_many = None


class Raises(Fake):
    def score(self, response, problem):
        if response == "boom":
            raise KeyError("verifier bug")
        return 1.0 if response == problem.answer else 0.0


class Sleeps(Fake):
    def score(self, response, problem):
        time.sleep(float(response))
        return 1.0


class Spins(Fake):
    def score(self, response, problem):
        while True:  # pure Python: the watchdog can interrupt it
            pass


class SafeRaises(Raises):
    score_is_safe = True


class MathLike(Fake):
    """A task with a hard-stop scorer (runs in a verifier subprocess)."""

    isolated_preload = ("trainer.tasks.math:warmup",)
    isolated_scorer = partial(score_math, max_answer_chars=1000)

    def score(self, response, problem):
        return score_math(response, problem)


def test_isolation_is_chosen_per_task():
    assert resolve_isolation(ArithmeticTask()) == "none"
    assert resolve_isolation(Raises()) == "thread"
    assert resolve_isolation(MathLike()) == "process"
    assert resolve_isolation(MathLike(), "thread") == "thread"
    with pytest.raises(ValueError, match="isolated_scorer"):
        resolve_isolation(Raises(), "process")


@pytest.mark.parametrize("task", [Raises(), SafeRaises()])
def test_exception_is_zero_and_counted(task):
    assert safe_score(task, "boom", P, 1.0) == (0.0, "error")
    assert safe_score(task, "2", P, 1.0) == (1.0, None)
    rewards, counts = score_batch(task, ["2", "boom", "3", "boom"], [P] * 4, 1.0)
    assert rewards == [1.0, 0.0, 0.0, 0.0] and counts == {"errors": 2, "timeouts": 0}


def test_non_numeric_reward_is_an_error():
    class Bad(Fake):
        score_is_safe = True

        def score(self, response, problem):
            return {"nan": float("nan"), "none": None}[response]

    assert safe_score(Bad(), "nan", P, 1.0) == (0.0, "error")
    assert safe_score(Bad(), "none", P, 1.0) == (0.0, "error")


def test_sleeping_scorer_times_out_quickly():
    t0 = time.perf_counter()
    assert safe_score(Sleeps(), "1.5", P, 0.2) == (0.0, "timeout")
    assert time.perf_counter() - t0 < 1.0
    rewards, counts = score_batch(Sleeps(), ["0", "1.5", "0"], [P] * 3, 0.2)
    assert rewards == [1.0, 0.0, 1.0] and counts == {"errors": 0, "timeouts": 1}


def test_spinning_thread_is_interrupted_after_timeout():
    assert safe_score(Spins(), "", P, 0.1) == (0.0, "timeout")
    spinner = verify._abandoned[-1]
    spinner.join(2.0)
    assert not spinner.is_alive()  # ScoreTimeout was raised inside it
    assert stuck_threads() >= 0


def test_works_from_a_non_main_thread():
    out = {}
    t = threading.Thread(target=lambda: out.update(r=safe_score(Sleeps(), "5", P, 0.1)))
    t.start()
    t.join(5)
    assert out == {"r": (0.0, "timeout")}


def test_safe_path_is_cheap():
    task = ArithmeticTask()
    problems = task.train_problems(0, 5000, 0)
    t0 = time.perf_counter()
    rewards, counts = score_batch(task, [p.answer for p in problems], problems, 1.0)
    assert sum(rewards) == 5000 and counts == {"errors": 0, "timeouts": 0}
    assert time.perf_counter() - t0 < 0.5  # ~2 ms measured; the watchdog thread would cost ~0.3 s


def test_length_mismatch_is_rejected():
    with pytest.raises(ValueError, match="2 responses but 1 problems"):
        score_batch(Raises(), ["a", "b"], [P], 1.0)


def test_subprocess_scorer_hard_stops_a_gil_holding_hang():
    """sympy evaluates 9^(9^9) as one C big-integer power holding the GIL for minutes: only
    a killed subprocess stops it. The other responses in the batch are still scored."""
    task, half = MathLike(), Problem("", "0.5")
    score_batch(task, ["\\boxed{1}"] * 2, [half] * 2, 30.0, workers=2)  # start the workers (not timed)
    responses = ["\\boxed{\\frac{1}{2}}", "\\boxed{9^{9^{9}}}", "\\boxed{3}", "\\boxed{0.5}", "oops"]
    t0 = time.perf_counter()
    rewards, counts = score_batch(task, responses, [half] * 5, 1.0, workers=2)
    assert rewards == [1.0, 0.0, 0.0, 1.0, 0.0] and counts == {"errors": 0, "timeouts": 1}
    assert time.perf_counter() - t0 < 20.0  # 1 s deadline + one worker restart
    assert safe_score(task, "\\boxed{\\frac{1}{2}}", half, 5.0) == (1.0, None)


def test_subprocess_errors_and_unpicklable_scorers():
    assert scorer_process.run_isolated(json.loads, [("1",), ("{bad",)], 5.0, 1) == [(1, None), (None, "error")]
    assert scorer_process.run_isolated(lambda x: x, [(1,)], 5.0, 1) == [(None, "error")]
    assert scorer_process.run_isolated(time.sleep, [(5,), (0,)], 0.3, 1) == [(None, "timeout"), (None, None)]


def test_every_registered_task_declares_how_it_is_scored():
    """verify.py reads these members directly: a task without one would fail at its first score."""
    from trainer.tasks import TASKS

    for cls in TASKS.values():
        for member in ("name", "score_is_safe", "isolated_preload", "score_many", "score", "encode_prompt"):
            assert hasattr(cls, member), (cls.__name__, member)
    assert TASKS["arithmetic"].isolated_scorer is None and "isolated_scorer" in vars(TASKS["code"])
    assert TASKS["code"].score_many is not None and TASKS["math"].score_many is None
