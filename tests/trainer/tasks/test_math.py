import json
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.tasks.base import Problem
from trainer.tasks.math import PAPER_MATH_SYSTEM_PROMPT, PLAIN_SUFFIX, MathTask, last_boxed, score_math

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def hf_tokenizer():
    """A real, small HF fast tokenizer trained in memory (byte-level BPE): no downloads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["What is 1+1? The answer is \\boxed{2}.", PAPER_MATH_SYSTEM_PROMPT], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=CHAT_TEMPLATE)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


VERL_ROWS = [
    {"data_source": "gsm", "prompt": [{"role": "user", "content": "What is 1/2?"}],
     "reward_model": {"style": "rule", "ground_truth": "0.5"}},
    {"data_source": "gsm", "prompt": [{"role": "user", "content": "What is 2+2?"}],
     "reward_model": {"style": "rule", "ground_truth": "4"}},
    {"data_source": "own-system", "prompt": [{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "3*3?"}],
     "reward_model": {"ground_truth": "9"}},
]


def test_verl_jsonl_layout_with_paper_prompt_and_chat_template(tmp_path, hf_tokenizer):
    task = MathTask(_jsonl(tmp_path / "train.jsonl", VERL_ROWS), tokenizer=hf_tokenizer)
    p0, _, p2 = task.problems
    assert (p0.answer, p0.source, p0.meta["question"]) == ("0.5", "gsm", "What is 1/2?")
    assert p0.prompt == (f"<|im_start|>system\n{PAPER_MATH_SYSTEM_PROMPT}<|im_end|>\n"
                         "<|im_start|>user\nWhat is 1/2?<|im_end|>\n<|im_start|>assistant\n")
    # A row that brings its own system message keeps it, and gets no second one.
    assert "Be brief." in p2.prompt and PAPER_MATH_SYSTEM_PROMPT not in p2.prompt
    ids = task.encode_prompt(p0)
    assert task.tokenizer.hf.decode(ids) == p0.prompt
    assert task.tokenizer.eos_id == hf_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert task.tokenizer.pad_id == hf_tokenizer.convert_tokens_to_ids("<|endoftext|>")


def test_verl_parquet_layout(tmp_path, hf_tokenizer):
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(VERL_ROWS[:2]), path)
    task = MathTask(path, tokenizer=hf_tokenizer, use_chat_template=False)
    assert [(p.answer, p.source) for p in task.problems] == [("0.5", "gsm"), ("4", "gsm")]
    assert task.problems[1].prompt == f"{PAPER_MATH_SYSTEM_PROMPT}\n\nWhat is 2+2?{PLAIN_SUFFIX}"


def test_flat_layouts_and_benchmark_column_names(tmp_path, hf_tokenizer):
    train = _jsonl(tmp_path / "t.jsonl", [{"problem": "1+1?", "answer": "2"}, {"question": "2+1?", "answer": 3}])
    math500 = _jsonl(tmp_path / "math500.jsonl", [
        {"problem": "p", "solution": "so \\boxed{\\frac{1}{3}} ok", "answer": "\\frac{1}{3}"}])
    minerva = _jsonl(tmp_path / "minerva.jsonl", [{"problem": "p", "solution": "x \\boxed{1} then \\boxed{7\\,\\text{m}}"}])
    aime = tmp_path / "aime24.parquet"
    pq.write_table(pa.Table.from_pylist([{"ID": "2024-I-1", "Problem": "p", "Answer": 204}]), aime)
    olympiad = _jsonl(tmp_path / "olymp.jsonl", [{"question": "p", "final_answer": ["$\\frac{1}{2}$"]},
                                                 {"question": "q", "final_answer": ["$1$", "$2$"]}])
    task = MathTask(train, {"MATH-500": math500, "Minerva": minerva, "AIME24": aime, "OlympiadBench": olympiad},
                    tokenizer=hf_tokenizer)
    assert [(p.answer, p.source) for p in task.problems] == [("2", "t"), ("3", "t")]
    bench = task.benchmarks()
    assert list(bench) == ["MATH-500", "Minerva", "AIME24", "OlympiadBench"]
    assert bench["MATH-500"][0].answer == "\\frac{1}{3}"
    assert bench["Minerva"][0].answer == "7\\,\\text{m}"
    assert (bench["AIME24"][0].answer, bench["AIME24"][0].source) == ("204", "AIME24")
    assert [p.answer for p in bench["OlympiadBench"]] == ["\\frac{1}{2}", "1, 2"]


def test_missing_field_names_field_and_line(tmp_path, hf_tokenizer):
    bad = _jsonl(tmp_path / "bad.jsonl", [{"problem": "ok", "answer": "1"}, {"problem": "no answer here"}])
    with pytest.raises(ValueError, match=r"bad.jsonl: line 2: missing field 'answer'"):
        MathTask(bad, tokenizer=hf_tokenizer)
    bad = _jsonl(tmp_path / "bad2.jsonl", [{"answer": "1"}])
    with pytest.raises(ValueError, match=r"line 1: missing field 'question' \(expected one of prompt, problem"):
        MathTask(bad, tokenizer=hf_tokenizer)
    path = tmp_path / "bad.parquet"
    rows = [VERL_ROWS[0], {**VERL_ROWS[1], "reward_model": {"style": "rule", "ground_truth": None}}]
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(ValueError, match=r"bad.parquet: row 1: missing field 'reward_model.ground_truth'"):
        MathTask(path, tokenizer=hf_tokenizer)
    bad = _jsonl(tmp_path / "bad3.jsonl", [{"problem": "p", "solution": "no box"}])
    with pytest.raises(ValueError, match=r"line 1: field 'solution' has no \\boxed"):
        MathTask(bad, tokenizer=hf_tokenizer)
    (tmp_path / "bad4.jsonl").write_text('{"problem": "p", "answer": "1"}\n{oops\n')
    with pytest.raises(ValueError, match="line 2: invalid JSON"):
        MathTask(tmp_path / "bad4.jsonl", tokenizer=hf_tokenizer)


def test_train_stream_epochs_are_seeded_permutations(tmp_path, hf_tokenizer):
    rows = [{"problem": f"q{i}", "answer": str(i)} for i in range(7)]
    task = MathTask(_jsonl(tmp_path / "t.jsonl", rows), tokenizer=hf_tokenizer)
    s = task.train_problems(0, 20, seed=5)
    assert s == task.train_problems(0, 10, 5) + task.train_problems(10, 10, 5)
    assert s == MathTask(tmp_path / "t.jsonl", tokenizer=hf_tokenizer).train_problems(0, 20, 5)
    assert sorted(p.answer for p in s[:7]) == sorted(p.answer for p in s[7:14]) == [str(i) for i in range(7)]
    assert s[:7] != task.train_problems(0, 7, seed=6)


def test_max_prompt_tokens_drops_long_prompts(tmp_path, hf_tokenizer):
    rows = [{"problem": "1+1?", "answer": "2"}, {"problem": "long " * 200, "answer": "1"}]
    path = _jsonl(tmp_path / "t.jsonl", rows)
    full = MathTask(path, tokenizer=hf_tokenizer)
    limit = len(full.encode_prompt(full.problems[0]))
    task = MathTask(path, tokenizer=hf_tokenizer, max_prompt_tokens=limit)
    assert (len(task.problems), task.dropped) == (1, 1)


def test_last_boxed():
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}} c") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{{a}{b}}") == "{a}{b}"
    assert last_boxed("the answer is \\boxed 5$") == "5"
    assert last_boxed("\\fbox{3}") == "3"
    assert last_boxed("\\boxed{unbalanced") is None
    assert last_boxed("no box") is None


def test_math_verify_scoring():
    half = Problem("", "0.5")
    assert score_math("so \\boxed{\\frac{1}{2}}", half) == 1.0
    assert score_math("\\boxed{0.50}", half) == 1.0
    assert score_math("\\boxed{\\frac{1}{3}}", half) == 0.0
    assert score_math("the answer is 0.5", half) == 0.0  # no box, no reward
    assert score_math("\\boxed{0.5} wait, no: \\boxed{2}", half) == 0.0  # the last box counts
    assert score_math("\\boxed{}", half) == 0.0
    assert score_math("\\boxed{" + "1" * 2000 + "}", Problem("", "1" * 2000)) == 0.0  # over max_answer_chars
    assert score_math("\\boxed{x = 3}", Problem("", "3")) == 1.0


def test_math_scoring_off_the_main_thread():
    out = {}
    t = threading.Thread(target=lambda: out.update(r=score_math("\\boxed{\\frac{1}{2}}", Problem("", "0.5"))))
    t.start()
    t.join(30)
    assert out == {"r": 1.0}


# The paper's math system prompt, copied verbatim from arXiv 2602.14338, Appendix E ("System Prompt
# Design", "Math System Prompt: ..."), kept here independently of the code's constant.
PAPER_APPENDIX_E_MATH_PROMPT = (
    "Your task is to solve the given question step by step. You should conduct a systematic, thorough reasoning "
    "process before providing the final answer. This involves analyzing, summarizing, exploring, reassessing, and "
    "refining your reasoning process through multiple iterations. Each reasoning step should include detailed "
    "analysis, verification, and refinement of ideas. Include the final answer in \\boxed{} for closed-form results "
    "such as multiple-choice or numerical answers."
)


def test_paper_system_prompt_is_verbatim():
    assert PAPER_MATH_SYSTEM_PROMPT == PAPER_APPENDIX_E_MATH_PROMPT
