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


def test_generated_tasks_write_their_stream_and_score_by_their_own_verifier(tmp_path):
    # Every generated task in the registry: the rows carry the task and the prompt, and verl's
    # reward function scores each row's reference answer 1 and a wrong answer 0 by that task's verifier.
    from trainer.spec.config import parse_run_config
    from trainer.tasks import make_task
    from trainer.tasks.registry import tasks_with
    from trainer.verl.data import prepare as prepare_any

    for name in tasks_with("generated"):
        cfg = parse_run_config({"task": name, "method": "grpo", "steps": 2, "batch_prompts": 4, "eval_problems": 3})
        t, vals = prepare_any(cfg, tmp_path / name)
        rows = pq.read_table(t).to_pylist()
        expected = make_task(name).train_problems(0, 8, cfg.seed)
        assert [r["prompt"][0]["content"] for r in rows] == [p.prompt for p in expected]  # stream order
        assert len(vals) == len(make_task(name).benchmarks())
        for r in rows + pq.read_table(vals[0]).to_pylist():
            assert r["extra_info"]["task"] == name and r["extra_info"]["problem"] == r["prompt"][0]["content"]
            truth = r["reward_model"]["ground_truth"]
            assert compute_score(r["data_source"], truth, truth, extra_info=r["extra_info"]) == {"score": 1.0, "acc": 1.0}
            assert compute_score(r["data_source"], truth + "9", truth, extra_info=r["extra_info"])["score"] == 0.0
    # countdown's verifier: another equation reaching the target counts; the reference is not the only answer
    info = {"task": "countdown", "problem": "3 7 9>30:"}
    assert compute_score("C3", "9+7*3", "3*7+9", extra_info=info)["acc"] == 1.0
    assert compute_score("C3", "3*9+3", "3*7+9", extra_info=info)["acc"] == 0.0


def test_a_real_models_rows_ask_in_words_and_score_free_text_as_the_embedded_task_does(smollm2, tmp_path):
    # The installed real model on verl: the same problems in the same order, each asked as the
    # embedded task asks it (its question in words, the user message of the chat template), and the
    # reward reads the free-text answer with the embedded task's own verifier.
    from trainer.spec.config import parse_run_config
    from trainer.embedded.presets import build_generated_task
    from trainer.verl.data import prepare as prepare_any

    for name in ("arithmetic", "countdown"):
        cfg = parse_run_config({"preset": "smollm2-135m", "task": name, "method": "grpo", "steps": 2,
                                "batch_prompts": 4, "eval_problems": 3})
        task = build_generated_task(cfg, smollm2)
        t, vals = prepare_any(cfg, tmp_path / name)
        rows = pq.read_table(t).to_pylist()
        expected = task.train_problems(0, 8, cfg.seed)
        assert [r["prompt"] for r in rows] == [[{"role": "user", "content": task.question(p)}] for p in expected]
        # verl renders the row with the tokenizer's chat template: the embedded prompt's tokens exactly
        ids = task.chat.hf.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True, tokenize=True)
        assert list(getattr(ids, "input_ids", ids)) == task.encode_prompt(expected[0])
        for r, p in zip(rows + pq.read_table(vals[0]).to_pylist(), expected + task.benchmarks()[vals_name(task)][:3]):
            assert r["extra_info"]["chat"] is True and r["extra_info"]["problem"] == p.prompt
            truth = r["reward_model"]["ground_truth"]
            answers = [truth, f"The answer is {truth}.", f"{p.prompt}{truth}", "I do not know", f"{truth}9"]
            if name == "arithmetic":
                answers += [f"{p.prompt.rstrip('=')} = {truth}", f"It is {int(truth) + 1}."]
            for text in answers:
                got = compute_score(r["data_source"], text, truth, extra_info=r["extra_info"])
                assert got["acc"] == task.score(text, p), (name, text)
            assert compute_score(r["data_source"], f"The answer is {truth}.", truth, extra_info=r["extra_info"])["acc"] == 1.0


def vals_name(task) -> str:
    return next(iter(task.benchmarks()))
