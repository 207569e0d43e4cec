"""Asynchronous training on the embedded engine (trainer/spec/offpolicy.py, trainer/embedded/pipeline.py,
trainer/core/importance.py): the importance weights and the decoupled loss against a hand
computation, the proximal log-probs against a forward of the current model, the staleness
schedule, reproducibility across the two threads, resume with steps in flight, refusals by name."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.spec.config import ConfigError, for_method, parse_run_config
from trainer.core.importance import importance_weights, weight_stats
from trainer.core.losses import clipped_surrogate
from trainer.embedded.pipeline import sampling_version
from trainer.platform.run import run_training
from trainer.platform.sinks import MemorySink

TINY = {"steps": 6, "batch_prompts": 8, "n_total": 4, "aero": {"n_explore": 2}, "eval_every": 0, "eval_problems": 4, "eval_n": 2,
        "checkpoint_every": 2, "device": "cpu", "seed": 5}


def untimed(m: dict) -> dict:
    return {k: v for k, v in m.items() if not (k.startswith(("time/", "system/")) or k.endswith("_s"))}


def run(tmp_path, method="aero", should_stop=None, **kw):
    cfg = parse_run_config(for_method({**TINY, **kw}, method))
    sink = MemorySink()
    return run_training(cfg, tmp_path, sink, should_stop=should_stop), sink


def test_importance_weights_truncate_or_mask_at_the_cap():
    prox = torch.tensor([[math.log(0.5), math.log(0.9), math.log(0.3)]])
    behav = torch.tensor([[math.log(0.5), math.log(0.3), math.log(0.6)]])
    # raw weights pi_old / mu by hand: 1, 3, 0.5
    tis, capped = importance_weights(prox, behav, cap=2.0, mode="tis")
    assert tis.tolist()[0] == pytest.approx([1.0, 2.0, 0.5]) and capped.tolist() == [[False, True, False]]
    mis, _ = importance_weights(prox, behav, cap=2.0, mode="mis")
    assert mis.tolist()[0] == pytest.approx([1.0, 0.0, 0.5])
    none, _ = importance_weights(prox, behav, cap=2.0, mode="none")
    assert none.tolist()[0] == [1.0, 1.0, 1.0]
    stats = weight_stats(prox, behav, torch.tensor([[1.0, 1.0, 0.0]]), cap=2.0)  # the third token is padding
    assert stats == {"is_weight_mean": pytest.approx(2.0), "is_capped_frac": pytest.approx(0.5)}
    with pytest.raises(ValueError, match="correction"):
        importance_weights(prox, behav, cap=2.0, mode="clip")


def test_the_decoupled_loss_weights_each_tokens_clipped_term():
    logp = torch.tensor([[-0.2, -1.0], [-0.5, -0.7]])
    prox = torch.tensor([[-0.3, -1.0], [-0.5, -0.2]])
    w = torch.tensor([[1.5, 0.5], [2.0, 1.0]])
    adv = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 2)
    loss, _ = clipped_surrogate(logp, prox, adv, mask, 0.2, 0.2, "token-mean", weights=w)
    by_hand = 0.0
    for i in range(2):
        for t in range(2):
            rho = math.exp(logp[i, t] - prox[i, t])
            a = float(adv[i])
            by_hand += float(w[i, t]) * max(-a * rho, -a * min(max(rho, 0.8), 1.2))
    assert float(loss) == pytest.approx(by_hand / 4)
    plain, _ = clipped_surrogate(logp, prox, adv, mask, 0.2, 0.2, "token-mean")
    ones, _ = clipped_surrogate(logp, prox, adv, mask, 0.2, 0.2, "token-mean", weights=torch.ones(2, 2))
    assert float(ones) == float(plain)


def test_proximal_logprobs_are_the_current_models_and_the_weights_follow(tmp_path):
    """Rows sampled by one model, then the model updated: with_proximal gives each token's
    log-prob under the updated model (a forward by hand), and the weights are exp(prox - behaviour)."""
    from trainer.embedded.forward import collate, sequence_logprobs
    from trainer.embedded.loop import initial_state, step_context
    from trainer.embedded.collect import collect
    from trainer.embedded.presets import load_setup

    cfg = parse_run_config(for_method({**TINY, "offpolicy": {"max_staleness": 1, "correction": "tis", "is_cap": 1.05},
                                       "optim": {"lr": 3e-3, "warmup_steps": 0}}, "grpo"))  # a step that moves
    setup = load_setup(cfg)
    state = initial_state(cfg, setup)
    c = collect(step_context(cfg, setup, state), 0)
    state.updater.step(c.train, c.advantages)  # the policy moves on: the rows are now one version old
    rows, stats = state.updater.with_proximal(c.train)
    mb = collate(rows, setup.task.tokenizer.pad_id)
    with torch.no_grad():
        state.updater.model.train()
        by_hand, _ = sequence_logprobs(state.updater.model, mb, cfg.temperature, with_entropy=False)
    for i, r in enumerate(rows):
        p = len(r.prompt_ids)
        assert r.proximal_logprobs == pytest.approx(by_hand[i, p:p + r.length].tolist(), abs=1e-5)
        assert r.logprobs == c.train[i].logprobs  # the behaviour log-probs are kept
    assert torch.equal(mb.behaviour_logprobs, collate(c.train, setup.task.tokenizer.pad_id).old_logprobs)
    w = torch.exp(mb.old_logprobs - mb.behaviour_logprobs)
    m = mb.response_mask
    assert stats["offpolicy/is_weight_mean"] == pytest.approx(float((w * m).sum() / m.sum()), rel=1e-5)
    assert stats["offpolicy/is_capped_frac"] == pytest.approx(float(((w > 1.05).float() * m).sum() / m.sum()))
    assert 0 < stats["offpolicy/is_capped_frac"] < 1  # the step moved some tokens past a 5% cap, not all


def test_the_sampling_version_is_fixed_by_the_step():
    assert [sampling_version(j, 0, 2) for j in range(1, 7)] == [0, 0, 0, 1, 2, 3]
    assert [sampling_version(j, 3, 1) for j in range(4, 8)] == [3, 3, 4, 5]  # resumed after step 3
    assert [sampling_version(j, 0, 0) for j in range(1, 4)] == [0, 1, 2]  # k = 0: on-policy


@pytest.mark.parametrize("method", ["aero", "dapo"])
def test_asynchronous_runs_never_exceed_the_staleness_and_reproduce_from_their_seed(tmp_path, method):
    k = 2
    summary, sink = run(tmp_path / "a", method, offpolicy={"max_staleness": k})
    assert summary["status"] == "completed" and sorted(sink.steps) == list(range(1, 7))
    staleness = [sink.steps[j]["offpolicy/staleness_max"] for j in range(1, 7)]
    assert staleness == [min(k, j - 1) for j in range(1, 7)]  # never above k
    for j, m in sink.steps.items():
        assert m["offpolicy/staleness_mean"] == m["offpolicy/staleness_max"]  # one version samples a whole step
        assert ("offpolicy/is_weight_mean" in m) == (j > 1)  # tis on every stale step
        assert m["time/sampler_idle_s"] >= 0 and m["time/trainer_idle_s"] >= 0
        assert m["rollout/generated"] <= TINY["batch_prompts"] * TINY["n_total"] or method == "dapo"
    if method == "aero":  # the rescue budget is the synchronous one
        assert all(m["rollout/gen_calls"] == 1 + m["rescue/calls"] for m in sink.steps.values())
    for j, detail in sink.details.items():  # each stored row says which version sampled it
        assert detail["rollouts"] and {r["version"] for r in detail["rollouts"]} == {sampling_version(j, 0, k)}, j
    _, sink2 = run(tmp_path / "b", method, offpolicy={"max_staleness": k})
    for j in sink.steps:  # the schedule is fixed, not a race between the threads
        assert untimed(sink2.steps[j]) == untimed(sink.steps[j]), j


def test_a_zero_staleness_ignores_the_correction_settings(tmp_path):
    _, plain = run(tmp_path / "a", "aero", steps=3)
    _, set_ = run(tmp_path / "b", "aero", steps=3, offpolicy={"max_staleness": 0, "correction": "mis", "is_cap": 1.01})
    assert not any(key.startswith("offpolicy/") for key in plain.steps[1])
    assert all({r["version"] for r in d["rollouts"]} == {j - 1} for j, d in plain.details.items())  # on-policy
    for j in plain.steps:
        assert untimed(set_.steps[j]) == untimed(plain.steps[j])


def test_a_stopped_asynchronous_run_resumes_with_each_step_once(tmp_path):
    """Stopped after step 3 with steps 4-5 in flight (k = 2): the checkpoint holds the sampler's
    state before step 4, so the resume re-samples steps 4.. from the same data position and RNGs
    (with the step-3 policy), and every step is stored once. A second resume from the same
    checkpoint gives the same steps."""
    out = tmp_path / "run"
    calls = {"n": 0}

    def stop_after_three():
        calls["n"] += 1
        return calls["n"] > 3

    summary, first = run(out, "aero", should_stop=stop_after_three, checkpoint_every=0, offpolicy={"max_staleness": 2})
    assert summary["status"] == "stopped" and summary["last_step"] == 3 and sorted(first.steps) == [1, 2, 3]
    import shutil

    from trainer.embedded.checkpoint import load_latest_checkpoint

    saved = load_latest_checkpoint(out)  # the sampler had run ahead; the checkpoint holds where step 4 begins
    assert saved["step"] == 3 and saved["data_pos"] == sum(first.steps[j]["prompts/used"] for j in (1, 2, 3))
    shutil.copytree(out, tmp_path / "copy")
    summary, second = run(out, "aero", checkpoint_every=0, offpolicy={"max_staleness": 2})
    assert summary["status"] == "completed" and sorted(second.steps) == [4, 5, 6]
    assert [second.steps[j]["offpolicy/staleness_max"] for j in (4, 5, 6)] == [0, 1, 2]  # restarted at version 3
    assert second.steps[4]["prompts/used"] == first.steps[3]["prompts/used"]
    _, third = run(tmp_path / "copy", "aero", checkpoint_every=0, offpolicy={"max_staleness": 2})
    for j in (4, 5, 6):
        assert untimed(third.steps[j]) == untimed(second.steps[j]), j


def test_asynchronous_training_is_refused_by_name_where_it_cannot_run(monkeypatch):
    import dataclasses

    from trainer.methods import spec as registry

    with pytest.raises(ConfigError) as e:
        parse_run_config(for_method({"engine": "verl", "offpolicy": {"max_staleness": 1}}, "grpo"))
    assert [f for f, _ in e.value.issues] == ["offpolicy.max_staleness"]
    assert "embedded engine" in e.value.issues[0][1] and "one_step_off_policy" in e.value.issues[0][1]
    with pytest.raises(ConfigError) as e:
        parse_run_config({"rollout": {"sampler": "vllm"}, "offpolicy": {"max_staleness": 1}})
    assert ("offpolicy.max_staleness" in [f for f, _ in e.value.issues]) and "sampler=hf" in str(e.value)
    spec, step = registry._REGISTRY["grpo"]
    monkeypatch.setitem(registry._REGISTRY, "grpo", (dataclasses.replace(
        spec, needs=dataclasses.replace(spec.needs, off_policy=False)), step))
    with pytest.raises(ConfigError) as e:
        parse_run_config(for_method({"offpolicy": {"max_staleness": 1}}, "grpo"))
    assert e.value.issues == [("method", e.value.issues[0][1])] and "method grpo cannot" in e.value.issues[0][1]
    assert parse_run_config(for_method({"offpolicy": {"max_staleness": 0}}, "grpo")).offpolicy.max_staleness == 0
    for bad, field in [({"max_staleness": 9}, "offpolicy.max_staleness"), ({"correction": "clip"}, "offpolicy.correction"),
                       ({"is_cap": 1.0}, "offpolicy.is_cap"), ({"max_staleness": "two"}, "offpolicy.max_staleness")]:
        with pytest.raises(ConfigError) as e:
            parse_run_config({"offpolicy": bad})
        assert [f for f, _ in e.value.issues] == [field], bad
