"""The verl engine's stored step detail (trainer/verl/step_detail.py): a generated batch's rows
as StepRows (prompt text from the left-padded prompts, response text up to its mask), the
curated and stock-fit samples, the PlatformLogger passing the detail and system metrics to the
sink, and the launcher's relay forwarding them. The DataProto stand-in is a plain object with
the ``batch`` / ``non_tensor_batch`` columns these functions read (the main suite has no verl);
the last test builds a real DataProto and runs only where verl is installed."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trainer.spec.config import parse_run_config
from trainer.platform.step_detail import SampleRules
from trainer.platform.sinks import JsonlSink, MemorySink
from trainer.platform.system_metrics import SystemMonitor
from trainer.verl.collect import VerlCollected
from trainer.verl.step_detail import best_effort, curated_detail, stock_detail, verl_rows
from trainer.verl.step_metrics import JsonlRelay, PlatformLogger

PAD = 0
T_P, T_R = 4, 5


class CharTokenizer:
    """id k -> chr(ord('a') + k - 1); 0 is padding."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(ord("a") + i - 1) for i in ids if i != PAD)


def batch(prompts: list[list[int]], responses: list[list[int]], rewards: list[float], adv=None, uids=None):
    B = len(prompts)
    p = torch.zeros((B, T_P), dtype=torch.long)
    r = torch.zeros((B, T_R), dtype=torch.long)
    attn = torch.zeros((B, T_P + T_R), dtype=torch.long)
    mask = torch.zeros((B, T_R), dtype=torch.long)
    rm = torch.zeros((B, T_R))
    for i, (pi, ri) in enumerate(zip(prompts, responses)):
        p[i, T_P - len(pi):] = torch.tensor(pi)
        r[i, :len(ri)] = torch.tensor(ri)
        attn[i, T_P - len(pi):T_P + len(ri)] = 1
        mask[i, :len(ri)] = 1
        rm[i, len(ri) - 1] = rewards[i]
    cols = {"prompts": p, "responses": r, "attention_mask": attn, "response_mask": mask, "rm_scores": rm}
    if adv is not None:
        cols["advantages"] = torch.tensor(adv, dtype=torch.float32)[:, None] * mask
    return SimpleNamespace(batch=cols, non_tensor_batch={"uid": np.array(uids or [""] * B, dtype=object)})


def test_rows_decode_prompt_and_response_within_their_masks():
    out = batch([[1, 2], [3]], [[4, 5, 6, 7, 8], [9]], [1.0, 0.0])
    rows = verl_rows(out, np.array([0, 1]), np.array([0, 0]), CharTokenizer(), max_new_tokens=T_R, step=1)
    assert (rows.prompt_text(0), rows.response_text(0), rows.prompt_text(1), rows.response_text(1)) == ("ab", "defgh", "c", "i")
    assert rows.length.tolist() == [5, 1] and rows.truncated.tolist() == [True, False]
    assert rows.reward.tolist() == [1.0, 0.0] and rows.correct.tolist() == [True, False]


def test_curated_detail_marks_rescue_rounds_and_curated_rows():
    # prompt 0 explores 2 wrong rows, then a rescue round finds a correct one; prompt 1 explores 2 right
    out = batch([[1], [1], [2], [2], [1]], [[3], [4], [5], [5], [6]], [0.0, 0.0, 1.0, 1.0, 1.0])
    col = VerlCollected(train=None, generated=out, prompts_used=2, gen=None, advantages=np.array([-0.7, 0.7], dtype=np.float32),
                        groups=np.array([0, 0, 1, 1, 0]), rounds=np.array([0, 0, 0, 0, 1]), train_rows=np.array([0, 4]))
    cfg = parse_run_config({"method": "aero", "max_new_tokens": T_R})
    d = curated_detail(col, cfg, CharTokenizer(), SampleRules(prompts=4), step=3)
    by_row = {r["row"]: r for r in d["rollouts"]}
    assert [by_row[i]["stage"] for i in range(5)] == ["explore", "curated out", "curated out", "curated out", "rescue 1"]
    assert by_row[4]["advantage"] == pytest.approx(0.7) and by_row[4]["response"] == "f" and by_row[0]["stratum"] == "rescue"
    assert d["histograms"]["pass_rate"]["counts"][3] == 1 and d["histograms"]["pass_rate"]["counts"][9] == 1  # 1/3 and 2/2


def test_stock_detail_groups_by_uid_with_sequence_advantages():
    out = batch([[1], [1], [2], [2]], [[3], [4, 4], [5], [6]], [1.0, 0.0, 1.0, 1.0], adv=[1.0, -1.0, 0.0, 0.0],
                uids=["u7", "u7", "u3", "u3"])
    cfg = parse_run_config({"method": "grpo", "max_new_tokens": T_R})
    d = stock_detail(out, cfg, CharTokenizer(), SampleRules(prompts=4), step=1)
    assert [(r["group"], r["stage"], r["advantage"]) for r in d["rollouts"]] == [
        (0, "explore", 1.0), (0, "explore", -1.0), (1, "explore", 0.0), (1, "explore", 0.0)]
    assert sum(d["histograms"]["length"]["counts"]) == 4


def test_a_failing_detail_is_dropped_not_raised(caplog):
    assert best_effort(stock_detail, SimpleNamespace(batch={}, non_tensor_batch={}), None, None, None, 0) is None
    assert "could not be built" in caplog.text


def test_platform_logger_logs_detail_and_system_metrics_then_the_relay_forwards_them(tmp_path):
    src = JsonlSink(tmp_path)
    pending = [{"rollouts": [{"row": 0, "response": "<b>x</b>"}], "histograms": {}}]
    log = PlatformLogger(src, pending_detail=lambda: pending.pop() if pending else None, system=SystemMonitor())
    log.log({"training/global_step": 1, "actor/grad_norm": 1.5}, step=1)
    log.log({"training/global_step": 2, "actor/grad_norm": 1.0}, step=2)  # no detail this step
    dst = MemorySink()
    JsonlRelay(tmp_path, dst).pump()
    assert dst.details == {1: {"rollouts": [{"row": 0, "response": "<b>x</b>"}], "histograms": {}}}
    assert dst.steps[1]["train/grad_norm"] == 1.5 and dst.steps[2]["system/rss_mb"] > 10
    assert not any(k.startswith("system/gpu") for k in dst.steps[1])  # no GPU on this machine


def test_verl_rows_on_a_real_dataproto():
    pytest.importorskip("verl")
    from verl import DataProto

    fake = batch([[1, 2]], [[3, 4]], [1.0])
    out = DataProto.from_single_dict({**fake.batch, "uid": fake.non_tensor_batch["uid"]})
    rows = verl_rows(out, np.array([0]), np.array([0]), CharTokenizer(), max_new_tokens=T_R, step=1)
    assert (rows.prompt_text(0), rows.response_text(0), rows.length.tolist()) == ("ab", "cd", [2])
