"""The code task: every supported file layout, the paper prompt, code extraction, and batch
scoring through the real sandbox with its outcome counts."""

import json

import pytest

from trainer.tasks.code import PAPER_CODE_SYSTEM_PROMPT, CodeTask, extract_code, parse_row
from trainer.tasks.sandbox import Limits, TestSuite
from trainer.tasks.verify import score_batch

ADD_STDIO = "a, b = map(int, input().split())\nprint(a + b)"
LIMITS = Limits(test_timeout_s=1.0, timeout_s=5.0, memory_mb=512)


def fenced(code, lang="python"):
    return f"[ASSESS] easy.\nNext action: [OUTPUT]\n```{lang}\n{code}\n```\n"


# -- extraction ----------------------------------------------------------------------------------


def test_extracts_the_last_python_block():
    text = "```python\nprint(1)\n```\nthen\n```python\nprint(2)\n```\n```text\nnot code\n```"
    assert extract_code(text).strip() == "print(2)"
    assert extract_code("```py3\nx = 1\n```").strip() == "x = 1"


def test_falls_back_to_the_last_block_of_any_language():
    assert extract_code("```\nprint(3)\n```\nand ```cpp\nint main(){}\n```").strip() == "int main(){}"


@pytest.mark.parametrize("text", ["no code here", "```python\n\n```", "```python\nprint(1)"])
def test_no_complete_block_is_no_code(text):
    assert extract_code(text) is None


# -- layouts -------------------------------------------------------------------------------------


def test_apps_taco_stdio_and_call_based():
    _, t, _ = parse_row({"question": "Add.", "input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})}, "r")
    assert (t.kind, t.inputs, t.outputs) == ("stdio", ("1 2\n",), ("3\n",))
    row = {"question": "Add.", "starter_code": "def add(a, b):", "input_output": {"fn_name": "add",
           "inputs": [[1, 2], [3, 4]], "outputs": [[3], [7]]}}
    msgs, t, _ = parse_row(row, "r")
    assert (t.kind, t.fn_name, t.inputs, t.outputs) == ("call", "add", ("[1, 2]", "[3, 4]"), ([3], [7]))
    assert msgs[-1]["content"].endswith("```python\ndef add(a, b):\n```")
    lines = {"question": "q", "input_output": {"inputs": [["1 2", "3"]], "outputs": [["3", "3"]]}}  # lists of lines
    assert parse_row(lines, "r")[1].inputs == ("1 2\n3",)


def test_codecontests_uses_public_private_and_generated_tests():
    row = {"description": "Sum.", "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
           "private_tests": {"input": ["2 2\n"], "output": ["4\n"]},
           "generated_tests": {"input": ["0 0\n"], "output": ["0\n"]}}
    msgs, t, _ = parse_row(row, "r")
    assert msgs == [{"role": "user", "content": "Sum."}]
    assert t.kind == "stdio" and t.inputs == ("1 2\n", "2 2\n", "0 0\n") and t.outputs == ("3\n", "4\n", "0\n")


def test_prime_verl_ground_truth_shapes():
    chat = [{"role": "system", "content": "own"}, {"role": "user", "content": "Add."}]
    io = {"prompt": chat, "data_source": "prime", "reward_model": {"ground_truth": json.dumps(
        {"inputs": ["1 2"], "outputs": ["3"]})}}
    msgs, t, src = parse_row(io, "r")
    assert msgs == chat and src == "prime" and t.kind == "stdio"
    cases = {"prompt": "Add.", "reward_model": {"ground_truth": json.dumps([{"input": "1 2", "output": "3",
                                                                              "testtype": "stdin"}])}}
    assert parse_row(cases, "r")[1].inputs == ("1 2",)
    functional = {"prompt": "Add.", "fn_name": "add", "reward_model": {"ground_truth": json.dumps(
        [{"input": "1\n2", "output": "3", "testtype": "functional"}])}}
    t = parse_row(functional, "r")[1]
    assert (t.kind, t.inputs, t.outputs) == ("call", ("[1, 2]",), (3,))
    asserts = {"prompt": "Add.", "reward_model": {"ground_truth": json.dumps(["assert add(1, 2) == 3"])}}
    assert parse_row(asserts, "r")[1] == TestSuite("assert", ("assert add(1, 2) == 3",))


def test_mbpp_and_humaneval_asserts():
    mbpp = {"text": "Write add.", "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"],
            "test_setup_code": "import math"}
    msgs, t, _ = parse_row(mbpp, "r")
    assert msgs[-1]["content"] == "Write add." and t == TestSuite("assert", tuple(mbpp["test_list"]), setup="import math")
    he = {"prompt": "def add(a, b):\n    ...", "test": "def check(candidate):\n    assert candidate(1, 2) == 3",
          "entry_point": "add"}
    t = parse_row(he, "r")[1]
    assert t.kind == "assert" and t.inputs[0].rstrip().endswith("check(add)")


@pytest.mark.parametrize("row, field", [
    ({"input_output": "{}"}, "question"),
    ({"question": "q"}, "tests"),
    ({"question": "q", "input_output": "not json"}, "input_output"),
    ({"question": "q", "input_output": {"inputs": ["1"], "outputs": []}}, "input_output"),
    ({"question": "q", "public_tests": {"input": ["1"]}}, "public_tests"),
    ({"prompt": "q", "reward_model": {"style": "rule"}}, "reward_model.ground_truth"),
    ({"prompt": "q", "test": "assert 1"}, "entry_point"),
])
def test_bad_rows_name_the_field(row, field):
    with pytest.raises(ValueError) as err:
        parse_row(row, "data.jsonl: line 3")
    assert "data.jsonl: line 3" in str(err.value) and field in str(err.value)


# -- the task ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, hf_tokenizer_builder):
    return hf_tokenizer_builder(tmp_path_factory.mktemp("code-tok"), [PAPER_CODE_SYSTEM_PROMPT, ADD_STDIO, "Add two"])


def write_files(d):
    jsonl = d / "train.jsonl"
    jsonl.write_text(json.dumps({"question": "Add two numbers.", "input_output": json.dumps(
        {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]})}) + "\n")
    as_json = d / "mbpp.json"
    as_json.write_text(json.dumps([{"text": "Write add.", "test_list": ["assert add(1, 2) == 3"]}]))
    pq = d / "cc.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pqm

    pqm.write_table(pa.Table.from_pylist([{"description": "Sum.", "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
                                           "private_tests": {"input": ["4 4\n"], "output": ["8\n"]}}]), pq)
    return jsonl, as_json, pq


def test_task_loads_every_file_kind_with_the_paper_prompt(tmp_path, tokenizer):
    jsonl, as_json, pq = write_files(tmp_path)
    task = CodeTask(jsonl, benchmark_paths={"MBPP": as_json, "CodeContests": pq}, tokenizer=tokenizer, limits=LIMITS)
    p = task.train_problems(0, 1, seed=0)[0]
    assert p.prompt.startswith("<|im_start|>system\n" + PAPER_CODE_SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\n")
    assert p.prompt.endswith("<|im_start|>assistant\n") and len(p.meta["tests"]) == 2
    bench = task.benchmarks()
    assert list(bench) == ["MBPP", "CodeContests"] and bench["CodeContests"][0].source == "CodeContests"
    assert len(bench["CodeContests"][0].meta["tests"]) == 2 and bench["MBPP"][0].meta["tests"].kind == "assert"
    capped = CodeTask(pq, tokenizer=tokenizer, max_tests=1)
    assert len(capped.problems[0].meta["tests"]) == 1


def test_bad_file_row_names_file_and_line(tmp_path, tokenizer):
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps({"question": "ok", "input_output": {"inputs": ["1"], "outputs": ["1"]}}) + "\n"
                 + json.dumps({"question": "no tests"}) + "\n")
    with pytest.raises(ValueError) as err:
        CodeTask(f, tokenizer=tokenizer)
    assert str(f) in str(err.value) and "line 2" in str(err.value) and "tests" in str(err.value)


def test_score_batch_counts_outcomes_and_pass_rate(tmp_path, tokenizer):
    jsonl, _, _ = write_files(tmp_path)
    task = CodeTask(jsonl, tokenizer=tokenizer, limits=LIMITS, workers=4)
    p = task.problems[0]
    responses = [fenced(ADD_STDIO), fenced("print(3)"), "I cannot write code.", fenced("while True:\n    pass"),
                 fenced("1/0")]
    rewards, stats = score_batch(task, responses, [p] * len(responses), timeout_s=1.0)
    assert rewards == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert stats["sandbox/passed"] == 1 and stats["sandbox/wrong"] == 1 and stats["sandbox/no_code"] == 1
    assert stats["sandbox/timeouts"] == 1 and stats["sandbox/errors"] == 1
    assert stats["test_pass_sum"] == pytest.approx(1.0 + 0.5)  # the partial pass of "print(3)" is kept
    assert task.score(fenced(ADD_STDIO), p) == 1.0 and task.score("none", p) == 0.0

