"""common/metric_keys.py: the shared metric keys, each one documented in docs/metrics.md and
spelled as the trainer logs it."""

import re
from pathlib import Path

import common.metric_keys as mk

DOC = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()


def constants() -> dict[str, str]:
    """NAME -> key for every full key constant (not the prefixes)."""
    return {k: v for k, v in vars(mk).items() if k.isupper() and isinstance(v, str) and "/" in v and not v.endswith("/")}


def test_every_shared_key_is_documented():
    keys = set(constants().values()) | set(mk.SAVINGS_KEYS)
    documented = set(re.findall(r"`([a-z_]+/[a-z0-9_/{},]+)`", DOC))
    expanded = set()
    for d in documented:  # `savings/s{1,2,3}_tokens` -> the three keys
        m = re.fullmatch(r"(.*)\{([0-9,]+)\}(.*)", d)
        expanded |= {f"{m[1]}{x}{m[3]}" for x in m[2].split(",")} if m else {d}
    missing = sorted(k for k in keys if k not in expanded and not k.startswith(mk.EVAL_PREFIX))
    assert missing == [], missing
    assert "common/metric_keys.py" in DOC


def test_key_builders():
    assert mk.savings_key("s2", "flops") == "savings/s2_flops" and mk.SAVINGS_GRPO_TOKENS == "savings/grpo_tokens"
    assert mk.eval_key("MATH-500", mk.PASS_AT_K) == "eval/MATH-500/pass_at_k"
    assert mk.EVAL_HEADLINE == "eval/overall/avg_at_k"
    assert len(set(constants().values())) == len(constants())  # no two names for one key


# logged by asynchronous runs only (offpolicy.max_staleness > 0; docs/metrics.md "Asynchronous training")
ASYNC_ONLY = {mk.STALENESS_MEAN, mk.STALENESS_MAX, mk.IS_WEIGHT_MEAN, mk.IS_CAPPED_FRAC, mk.SAMPLER_IDLE_S,
              mk.TRAINER_IDLE_S}


def test_the_trainer_logs_the_shared_keys(tmp_path):
    """One tiny synchronous AERO step through the real loop logs every shared per-step key (KL
    only with kl_coef > 0) and none of asynchronous training's."""
    from trainer.spec.config import parse_run_config
    from trainer.platform.run import run_training
    from trainer.platform.sinks import MemorySink

    cfg = parse_run_config({"method": "aero", "steps": 1, "batch_prompts": 4, "n_total": 4,
                            "aero": {"n_explore": 2, "n_max": 4, "k_max": 1}, "eval_every": 0, "eval_problems": 4,
                            "eval_n": 2, "device": "cpu", "checkpoint_every": 0})
    sink = MemorySink()
    run_training(cfg, tmp_path, sink)
    logged = set(sink.steps[1])
    expected = {v for v in constants().values() if not v.startswith(mk.EVAL_PREFIX)} - {mk.TRAIN_KL} - ASYNC_ONLY
    assert expected - logged == set(), sorted(expected - logged)
    assert not ASYNC_ONLY & logged
    # one step off-policy: the second step trains stale rows and logs every asynchronous key too
    cfg = cfg.model_copy(update={"steps": 2, "offpolicy": cfg.offpolicy.model_copy(update={"max_staleness": 1})})
    sink = MemorySink()
    run_training(cfg, tmp_path / "async", sink)
    assert expected | ASYNC_ONLY <= set(sink.steps[2]), sorted((expected | ASYNC_ONLY) - set(sink.steps[2]))
