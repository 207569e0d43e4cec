"""AERO and DAPO step collection on real verl DataProto batches: rescue rounds as per-prompt
repeated batches padded to the agent-loop divisor and unpadded, curation with the shared core,
the step's own advantages on the training rows, and the update layout with masked padding. The
vLLM agent loop is the scripted stand-in of conftest.py; everything else is verl's own code."""

import math

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from trainer.spec.config import parse_run_config  # noqa: E402
from trainer.verl.collect import collect  # noqa: E402
from trainer.verl.rows import ADV_COLUMN, pad_for_update, real_rows, split_sizes, unpad_masked  # noqa: E402

AERO = {"preset": None, "model_path": "/m", "task": "math", "train_data": "/d.jsonl", "engine": "verl",
        "method": "aero", "batch_prompts": 4, "n_total": 6,
        "aero": {"n_explore": 4, "n_max": 10, "delta_n": 2, "negative_selection": "first", "rounds_per_call": 1}}
# per prompt: outcomes per engine call (explore, rescue call 1, 2, 3)
SCRIPT = {
    0: [[0, 0, 0, 0], [0, 0], [0, 0], [1, 0]],  # rescue set; rescued in round 3 at position 8
    1: [[1, 1, 1, 1]],                            # all-correct: S2, u~ = 5/6
    2: [[1, 0, 0, 0]],                            # low-success (u = 0.25): S3 keeps 1 + 1
    3: [[0, 0, 0, 0], [0, 1]],                    # rescue set; rescued in round 1 at position 5
}


def run_aero(vr, overrides=None, divisor=3, script=SCRIPT):
    cfg = parse_run_config({**AERO, **(overrides or {})})
    batch, gen_batch = vr.split(vr.prompt_batch(4))
    rollout = vr.ScriptedRollout(script)
    col = collect(cfg, lambda: (batch, gen_batch), rollout, divisor, np.random.default_rng(0))
    return cfg, col, rollout


def test_rescue_rounds_are_per_prompt_repeats_padded_to_the_divisor(vr):
    _, col, rollout = run_aero(vr)
    # explore P * n_explore; then only the active rescue prompts, delta_n each, until rescued / budget;
    # each request padded to a multiple of 3 agent-loop workers with copies of its first rows
    assert rollout.requests == [[0] * 4 + [1] * 4 + [2] * 4 + [3] * 4 + [0, 0], [0, 0, 3, 3, 0, 0], [0, 0, 0],
                                [0, 0, 0]]
    # ... and what came back was unpadded: 24 real rows
    assert (col.gen.calls, col.gen.rows, col.gen.pad_rows) == (4, 24, 2 + 2 + 1 + 1)
    assert len(col.generated) == 24


def test_curated_rows_match_the_hand_computed_groups(vr):
    _, col, _ = run_aero(vr)
    # generation order: explore rows 0-15 (prompt-major), call 1 rows 16-19 = [p0, p0, p3, p3],
    # call 2 rows 20-21 = p0, call 3 rows 22-23 = p0 (22 is p0's first correct rollout, position 8)
    train = col.train
    rm = train.batch["rm_scores"].sum(-1).tolist()
    uids = train.non_tensor_batch["uid"].tolist()
    assert uids == ["u0", "u0", "u1", "u1", "u1", "u1", "u2", "u2", "u3", "u3"]
    assert rm == [0, 1, 1, 1, 1, 1, 1, 0, 0, 1]
    # the rows are the generated ones, identified by their response tokens (10 + row within the call)
    first_tokens = train.batch["responses"][:, 0].tolist()
    assert first_tokens == [10, 10, 14, 15, 16, 17, 18, 19, 22, 13]
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO on a {0, 1} pair: mean 1/2, unbiased std sqrt(1/2)
    bayes = (1 - 5 / 6) / math.sqrt(5 / 6 * 1 / 6)  # S2 on the all-correct group: (r - u~) / sqrt(u~ (1 - u~))
    assert train.batch[ADV_COLUMN].tolist() == pytest.approx([-a, a, bayes, bayes, bayes, bayes, a, -a, -a, a], abs=1e-5)
    assert col.advantages.tolist() == pytest.approx(train.batch[ADV_COLUMN].tolist())
    s = col.stats
    assert (s["rescue/rescued"], s["rescue/rounds"], s["rescue/calls"], s["rescue/generated"], s["rescue/unused"]) == (
        2, 3, 3, 8, 0)
    assert (s["groups/rescued"], s["groups/bayes"], s["groups/low"], s["groups/high"]) == (2, 1, 1, 0)
    assert (s["strata/rescue"], s["strata/low"], s["strata/high"], s["zero_acc/after_explore"]) == (2, 1, 1, 0.5)
    assert s["zero_acc/after_rescue"] == 0.0
    ledger = col.cost_metrics.args[1]  # the savings' inputs, bound into the step's cost metrics
    assert ledger["produced"].tolist() == [10, 4, 4, 6] and ledger["rescued"].tolist() == [True, False, False, True]


def test_speculative_rounds_give_the_same_groups(vr):
    """rounds_per_call = 3 generates three rounds per call and replays them (trainer.core.rescue);
    with n_total 10 the budget (24) does not bind, so the curated groups equal the sequential ones."""
    script = {**SCRIPT, 0: [[0, 0, 0, 0], [0, 0, 0, 0, 1, 0]], 3: [[0, 0, 0, 0], [0, 1, 0, 0, 0, 0]]}
    _, seq, _ = run_aero(vr, {"n_total": 10})
    _, spec, rollout = run_aero(vr, {"n_total": 10, "aero": {**AERO["aero"], "rounds_per_call": 3}}, script=script)
    assert len(rollout.requests) == 2
    assert spec.train.non_tensor_batch["uid"].tolist() == seq.train.non_tensor_batch["uid"].tolist()
    assert spec.train.batch["rm_scores"].sum(-1).tolist() == seq.train.batch["rm_scores"].sum(-1).tolist()
    assert spec.stats["rescue/unused"] == 4  # p3's rounds 2-3 were generated after its rescue


def test_ablation_without_s2_s3_keeps_whole_groups(vr):
    _, col, _ = run_aero(vr, {"method": "aero-s1"})
    assert col.train.non_tensor_batch["uid"].tolist().count("u1") == 4  # zero group: all kept, no baseline
    assert col.train.non_tensor_batch["uid"].tolist().count("u2") == 4  # low group: S3 off
    adv = dict(zip(col.train.non_tensor_batch["uid"].tolist(), col.advantages.tolist()))
    assert adv["u1"] == 0.0  # no Bayesian baseline: the all-correct group has no signal


def test_update_layout_matches_the_embedded_mini_batches(vr):
    """10 curated rows, 3 mini-batches, 2 ranks: the embedded update's split is 4, 3, 3 rows; each
    verl mini-batch is padded to 4 (a multiple of dp) with masked rows, and dealt so that rank r's
    j-th local mini-batch is piece r of mini-batch j."""
    _, col, _ = run_aero(vr)
    assert split_sizes(10, 3) == [4, 3, 3] and split_sizes(2, 4) == [1, 1]
    padded, layout = pad_for_update(col.train, 3, 2, vr.PAD)
    assert (len(padded), layout.n_pad, layout.mini_batch_size, layout.mini_batches) == (12, 2, 4, 3)
    assert layout.rows_per_mini_batch == pytest.approx(10 / 3)
    first = padded.batch["responses"][:, 0].tolist()  # identifies each real row (conftest: 10 + row)
    real = real_rows(padded)
    pad = torch.as_tensor(~real)
    expect = [10, 10, 14, 15, 16, 17, 18, 19, 22, 13]  # the curated rows in order
    chunks = [expect[0:4], expect[4:7], expect[7:10]]
    for j, chunk in enumerate(chunks):  # mini-batch j = rank 0's local j + rank 1's local j
        rows = [r * 6 + j * 2 + i for r in range(2) for i in range(2)]
        assert [first[p] for p in rows if real[p]] == chunk
    assert padded.batch["response_mask"][pad].sum() == 0 and padded.batch[ADV_COLUMN][pad].abs().sum() == 0
    assert padded.batch["attention_mask"][pad].sum(-1).tolist() == [2, 2]
    assert padded.batch["rm_scores"][pad].abs().sum() == 0
    uids = padded.non_tensor_batch["uid"]
    assert len(set(uids[~real])) == 2 and not set(uids[~real]) & set(uids[real])  # singleton groups
    back = unpad_masked(padded)
    assert sorted(back.batch["responses"][:, 0].tolist()) == sorted(expect)


def test_dapo_group_filter_keeps_varied_groups_and_stops_at_the_cap(vr):
    from verl import DataProto

    cfg = parse_run_config({**AERO, "method": "dapo", "n_total": 2, "batch_prompts": 2, "aero": None,
                            "dapo": {"max_gen_rounds": 2, "overlong_buffer": 2}})
    rollout = vr.ScriptedRollout({0: [[1, 0], [1, 1]], 1: [[1, 1], [0, 1]]})
    batches = iter([vr.split(vr.prompt_batch(2)), vr.split(vr.prompt_batch(2))])
    col = collect(cfg, lambda: next(batches), rollout, divisor=4)
    assert isinstance(col.train, DataProto)
    # batch 1 keeps prompt 0 (1, 0); batch 2 keeps prompt 1 (0, 1); then P = 2 groups are kept
    assert col.train.batch["rm_scores"].sum(-1).tolist() == [1, 0, 0, 1]
    assert (col.stats["dapo/gen_rounds"], col.stats["dapo/kept_groups"], col.stats["dapo/cap_hit"]) == (2, 2, 0)
    assert len(col.generated) == 8 and col.prompts_used == 4
    # DAPO's rows carry their advantages in the same method-neutral column as AERO's
    assert ADV_COLUMN == "precomputed_advantages" and ADV_COLUMN in col.train.batch.keys()
    none = collect(cfg, lambda: vr.split(vr.prompt_batch(2)), vr.ScriptedRollout({}), divisor=4)
    assert none.train is None and none.stats["dapo/cap_hit"] == 1  # all-fail twice: train nothing, no crash
