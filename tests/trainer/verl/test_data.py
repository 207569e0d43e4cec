"""The run's math files as verl parquet, and the reward function verl's reward loop calls."""

import json

import pyarrow.parquet as pq

from trainer.tasks.math import PAPER_MATH_SYSTEM_PROMPT
from trainer.verl.data import prepare_math as prepare
from trainer.verl.reward import compute_score


def test_prepare_writes_verl_rows_with_the_paper_prompt_and_benchmark_names(tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text(json.dumps({"prompt": [{"role": "user", "content": "1+1?"}], "data_source": "dapo",
                                 "reward_model": {"ground_truth": "2"}}) + "\n" +
                     json.dumps({"prompt": [{"role": "system", "content": "own"}, {"role": "user", "content": "2+2?"}],
                                 "reward_model": {"ground_truth": "4"}}) + "\n")
    aime = tmp_path / "aime.jsonl"
    aime.write_text(json.dumps({"Problem": "3+3?", "Answer": 6}) + "\n")
    olymp = tmp_path / "olymp.json"
    olymp.write_text(json.dumps([{"question": "roots?", "final_answer": ["1", "2"]}]))
    t, vals = prepare(train, {"AIME24": aime, "OlympiadBench": olymp}, tmp_path / "out")
    rows = pq.read_table(t).to_pylist()
    assert rows[0]["prompt"] == [{"role": "system", "content": PAPER_MATH_SYSTEM_PROMPT}, {"role": "user", "content": "1+1?"}]
    assert rows[1]["prompt"][0] == {"role": "system", "content": "own"}  # the row's own system prompt wins
    assert [r["data_source"] for r in rows] == ["dapo", "train"]
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["2", "4"]
    v = [pq.read_table(p).to_pylist() for p in vals]
    assert [r[0]["data_source"] for r in v] == ["AIME24", "OlympiadBench"]
    assert v[0][0]["reward_model"]["ground_truth"] == "6" and v[1][0]["reward_model"]["ground_truth"] == "1, 2"
    assert v[0][0]["extra_info"] == {"index": 0, "where": "line 1"}


def test_compute_score_is_the_math_verifier():
    assert compute_score("toy", "so \\boxed{\\frac{1}{2}}", "0.5") == {"score": 1.0, "acc": 1.0}
    assert compute_score("toy", "\\boxed{3} then \\boxed{4}", "3") == {"score": 0.0, "acc": 0.0}  # last box counts
    assert compute_score("toy", "no box: 3", "3")["acc"] == 0.0
    assert compute_score("toy", "\\boxed{6}", 6, extra_info={"index": 1})["score"] == 1.0
