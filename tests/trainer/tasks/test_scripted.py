"""The scripted-strata task: deterministic synthetic prompts, scripted rewards whose strata match
the paper's 1.5B run under the real method steps, and a stop set that gives a random-weight
policy the intended response lengths."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.spec.config import parse_run_config
from trainer.methods.sampler import Samples
from trainer.methods.spec import get_step
from trainer.tasks import TASKS, make_task
from trainer.tasks.scripted import EOS_ID, MEAN_RESPONSE_TOKENS, PROMPT_TOKENS, StrataTask, expected_strata

VOCAB = 151_936


@pytest.fixture(scope="module")
def task() -> StrataTask:
    return make_task("strata", vocab_size=VOCAB, max_prompt_tokens=1024)


def test_registered_and_needs_no_files(task):
    assert TASKS["strata"] is StrataTask
    assert task.benchmarks() == {} and task.score_is_safe and task.isolated_scorer is None
    tok = task.tokenizer
    assert (tok.vocab_size, tok.eos_id, tok.pad_id) == (VOCAB, EOS_ID, EOS_ID)
    assert tok.encode(tok.decode([5, 151_935, 0])) == [5, 151_935, 0]


def test_prompts_are_deterministic_and_never_hold_a_stop_id(task):
    a = task.train_problems(0, 64, seed=3)
    assert [p.prompt for p in a] == [p.prompt for p in task.train_problems(0, 64, seed=3)]
    assert [p.prompt for p in a[10:20]] == [p.prompt for p in task.train_problems(10, 10, seed=3)]  # resumable
    assert [p.prompt for p in a] != [p.prompt for p in task.train_problems(0, 64, seed=4)]
    lengths = [len(task.encode_prompt(p)) for p in a]
    assert PROMPT_TOKENS[0] <= min(lengths) and max(lengths) <= PROMPT_TOKENS[1]
    assert abs(np.mean(lengths) - 150) < 15
    ids = np.concatenate([task.encode_prompt(p) for p in a])
    assert ids.max() < EOS_ID and not np.isin(ids, task.stop_ids).any()
    short = make_task("strata", vocab_size=VOCAB, max_prompt_tokens=40).train_problems(0, 8, seed=3)
    assert {len(p.prompt.split()) for p in short} == {40}  # capped by max_prompt_tokens


def test_rewards_are_a_fixed_function_of_prompt_and_response(task):
    probs = task.train_problems(0, 400, seed=0)
    rng = np.random.default_rng(0)
    responses = [task.tokenizer.decode(rng.integers(0, VOCAB, 20).tolist()) for _ in probs]
    first = [task.score(r, p) for r, p in zip(responses, probs)]
    assert first == [task.score(r, p) for r, p in zip(responses, probs)]  # order and caller do not matter
    p = np.array([float(q.answer) for q in probs])
    assert set(first) <= {0.0, 1.0}
    assert abs(np.mean(first) - p.mean()) < 0.07  # Bernoulli(p): the mean reward is the mean p
    assert not any(f for f, q in zip(first, p) if q < 1e-4)  # a hopeless prompt is never solved


def test_expected_strata_are_the_papers():
    grpo = expected_strata(16)
    assert grpo["all_fail"] == pytest.approx(0.336, abs=0.01)  # paper: zero-accuracy ratio 0.336 (GRPO, 1.5B)
    assert grpo["all_fail"] + grpo["all_correct"] > 0.35  # Figure 1(a): more than 35% zero-advantage
    assert 0.08 < grpo["low"] < 0.2 and 0.4 < grpo["high"] < 0.6 and 0.02 < grpo["all_correct"] < 0.1
    assert sum(grpo.values()) == pytest.approx(1.0)


class StrataSampler:
    """The method steps' Sampler over the strata task with the engine replaced by random
    response tokens: the rewards are the task's own scorer."""

    def __init__(self, task: StrataTask, P: int, seed: int):
        self.task, self.P, self.seed, self.pos = task, P, seed, 0
        self.rng, self.rows, self.state = np.random.default_rng(seed), 0, {}

    def next_prompts(self) -> int:
        self.problems = self.task.train_problems(self.pos, self.P, self.seed)
        self.pos += self.P
        return self.P

    def prompt_keys(self):
        return [None] * self.P

    def sample(self, counts, round_: int) -> Samples:
        prompt = [p for p, n in enumerate(counts) for _ in range(int(n))]
        rewards = [self.task.score(self.task.tokenizer.decode(self.rng.integers(0, VOCAB, 8).tolist()), self.problems[p])
                   for p in prompt]
        first, self.rows = self.rows, self.rows + len(prompt)
        return Samples.build(first, prompt, rewards, [8] * len(prompt), [158] * len(prompt))


def run_steps(task, method: str, steps: int = 6, P: int = 128) -> list[dict]:
    cfg = parse_run_config({"preset": None, "model_shape": "tiny-151k", "task": "strata", "method": method,
                            "batch_prompts": P})
    out = []
    for s in range(steps):
        sampler = StrataSampler(task, P, seed=s)
        res = get_step(method)(cfg, sampler, np.random.default_rng(s))
        out.append({**res.stats, "trained": len(res.rows)})
    return out


def test_sampled_strata_land_on_the_target_under_the_real_steps(task):
    """768 prompts per method through the registered GRPO and AERO steps: GRPO's zero-accuracy
    ratio at n = 16 is the paper's 0.336, AERO's rescue lowers it toward the paper's 0.261, and
    AERO trains about a third of GRPO's rollouts (the paper: 2.8x fewer training FLOPs)."""
    grpo, aero = run_steps(task, "grpo"), run_steps(task, "aero")
    mean = lambda rows, k: float(np.mean([r[k] for r in rows]))  # noqa: E731
    assert mean(grpo, "zero_acc/after_explore") == pytest.approx(0.336, abs=0.05)
    assert mean(grpo, "all_correct/ratio") == pytest.approx(expected_strata(16)["all_correct"], abs=0.03)
    assert mean(aero, "zero_acc/after_explore") == pytest.approx(expected_strata(8)["all_fail"], abs=0.05)
    assert 0.2 < mean(aero, "zero_acc/after_rescue") < 0.33
    assert mean(aero, "trained") / mean(grpo, "trained") == pytest.approx(0.34, abs=0.06)


def test_stop_set_gives_a_random_policy_the_mean_length(task):
    """The engine stops a response at any of the task's stop ids; under a random-weight policy
    (the tiny-151k shape, real vocabulary) the probability of sampling one at a position is
    ~1 / MEAN_RESPONSE_TOKENS, so lengths are geometric with that mean."""
    from trainer.embedded.presets import stop_token_ids
    from trainer.embedded.shapes import build_shape_model

    assert len(task.stop_ids) == round(VOCAB / MEAN_RESPONSE_TOKENS) and EOS_ID in task.stop_ids
    model = build_shape_model("tiny-151k", seed=0)
    assert stop_token_ids(task, model) == list(task.stop_ids)  # the engine's stop set is the task's
    ids = torch.as_tensor([task.encode_prompt(p)[:100] for p in task.train_problems(0, 8, seed=0)])
    with torch.no_grad():
        probs = model(input_ids=ids).logits.float().softmax(-1)
    hazard = probs[..., list(task.stop_ids)].sum(-1).mean().item()
    assert 1 / hazard == pytest.approx(MEAN_RESPONSE_TOKENS, rel=0.15)
