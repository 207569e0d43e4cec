"""The code task: local problem files with tests, the paper's code prompt, sandboxed reward.

Rows are read from parquet, JSONL or a JSON list (:func:`trainer.tasks.math.read_records`).
The question comes from ``prompt`` (a chat list or a string; verl, PRIME/Eurus, HumanEval),
``question`` (APPS, TACO), ``description`` (CodeContests), ``problem`` or ``text`` (MBPP);
an optional ``starter_code`` is appended to it. Tests, first layout found wins:

* verl / PRIME (Eurus-2-RL-Data): ``reward_model.ground_truth``, a JSON string (or the value
  itself) holding any of the shapes below: an ``inputs``/``outputs`` object, a list of
  ``{"input", "output"[, "testtype"]}`` cases (LiveCodeBench style), or assert strings.
* APPS / TACO: ``input_output``, a JSON string or object ``{"inputs": [...], "outputs": [...]}``,
  with ``fn_name`` (there or on the row) for call-based problems: each input is the argument
  list, each output the return value (APPS wraps it in a one-element list; both forms pass).
* CodeContests: ``public_tests``, ``private_tests``, ``generated_tests``, each
  ``{"input": [...], "output": [...]}``; all three are used, in that order.
* Assert style: ``test_list`` (MBPP; one test per assert, ``test_setup_code`` runs first) or
  ``test`` + ``entry_point`` (HumanEval: the script, then ``check(<entry_point>)``).

A bad row raises ``ValueError`` naming the file, the row or line and the field. Stdio inputs
and outputs given as lists of lines are joined with newlines.

Prompt: the paper's code system prompt (Appendix E) as a system message unless the row's
chat list has one, then the tokenizer's chat template with the generation prompt (plain text
without a template). Reward: the code in the response's LAST ```python fenced block (else the
last fenced block of any language; none = reward 0, counted ``no_code``) runs in the sandbox
(:mod:`trainer.tasks.sandbox`) against every test; 1 only if all pass.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from trainer.tasks.base import Problem
from trainer.tasks.math import FileTask, row_field, chat_messages, format_prompt, read_records
from trainer.tasks.sandbox import Limits, Result, TestSuite, run_candidate, run_many

if TYPE_CHECKING:
    from trainer.spec.config import RunConfig
    from trainer.spec.operator_policy import RunPolicy

# Appendix E, "System Prompt Design", verbatim except that the paper's typeset quotes
# (‘‘‘python ... ‘‘‘) are the Markdown fence the model is asked to write (```python ... ```).
PAPER_CODE_SYSTEM_PROMPT = (
    "When tackling complex reasoning tasks, you have access to the following actions. Use them as needed to "
    "progress through your thought process. [ASSESS] [ADVANCE] [VERIFY] [SIMPLIFY] [SYNTHESIZE] [PIVOT] [OUTPUT] "
    "You should strictly follow the format below: [ACTION NAME] Your action step 1 Your action step 2 … Next action: "
    "[NEXT ACTION NAME] After reasoning, output the final executable Python code enclosed in a single code block, "
    "e.g., ```python your solution code ```"
)
QUESTION_FIELDS = ("prompt", "question", "description", "problem", "text")
TEST_FIELDS = ("reward_model.ground_truth", "input_output", "public_tests", "test_list", "test")
CONTESTS_FIELDS = ("public_tests", "private_tests", "generated_tests")
PY_LANGS = ("python", "python3", "py", "py3")
# Metric key per sandbox outcome (docs/metrics.md).
OUTCOME_KEYS = {"passed": "sandbox/passed", "wrong": "sandbox/wrong", "error": "sandbox/errors",
                "timeout": "sandbox/timeouts", "memory": "sandbox/memory", "output": "sandbox/output_limit",
                "blocked": "sandbox/blocked", "no_code": "sandbox/no_code"}

_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.S)


# -- extraction ----------------------------------------------------------------------------------


def extract_code(response: str) -> str | None:
    """The LAST ```python (or py/python3) fenced block of ``response``; else the last fenced
    block of any language; None if there is no complete non-empty block (an unterminated
    final fence, e.g. a truncated response, does not count)."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(response) if body.strip()]
    python = [body for lang, body in blocks if lang in PY_LANGS]
    if python:
        return python[-1]
    return blocks[-1][1] if blocks else None


# -- rows ----------------------------------------------------------------------------------------


def _json(value: Any, where: str, name: str) -> Any:
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except ValueError:
            if name == "reward_model.ground_truth":
                return value  # a bare assert script
            raise ValueError(f"{where}: field '{name}' is not valid JSON") from None
    return value


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple, np.ndarray)):
        return "\n".join(str(v) for v in value)
    return str(value)


def _io_suite(io: Mapping[str, Any], where: str, name: str, fn_name: str | None) -> TestSuite:
    """APPS/TACO ``{"inputs", "outputs"[, "fn_name"]}``: call-based when there is a fn_name."""
    inputs, outputs = io.get("inputs"), io.get("outputs")
    if inputs is None or outputs is None:
        raise ValueError(f"{where}: field '{name}' needs 'inputs' and 'outputs'")
    inputs, outputs = list(inputs), list(outputs)
    if len(inputs) != len(outputs):
        raise ValueError(f"{where}: field '{name}' has {len(inputs)} inputs but {len(outputs)} outputs")
    fn_name = io.get("fn_name") or fn_name
    if fn_name:
        return TestSuite("call", tuple(json.dumps(_args(a)) for a in inputs), tuple(_plain(o) for o in outputs),
                         fn_name=str(fn_name))
    return TestSuite("stdio", tuple(_text(i) for i in inputs), tuple(_text(o) for o in outputs))


def _args(value: Any) -> list:
    value = _plain(value)
    return value if isinstance(value, list) else [value]


def _plain(value: Any) -> Any:
    """numpy arrays / tuples (parquet) as lists, recursively, so they serialise as JSON."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value.item() if isinstance(value, np.generic) else value


def _cases_suite(cases: list, where: str, name: str, fn_name: str | None) -> TestSuite:
    """LiveCodeBench-style ``[{"input", "output", "testtype"}]`` cases."""
    if any(not isinstance(c, Mapping) or "input" not in c or "output" not in c for c in cases):
        raise ValueError(f"{where}: field '{name}': each test case needs 'input' and 'output'")
    if any(c.get("testtype") == "functional" for c in cases):
        if not fn_name:
            raise ValueError(f"{where}: field '{name}' has functional tests but the row has no 'fn_name'")
        return TestSuite("call", tuple(json.dumps(_lines_args(c["input"], where, name)) for c in cases),
                         tuple(_plain(_json(c["output"], where, name)) for c in cases), fn_name=fn_name)
    return TestSuite("stdio", tuple(_text(c["input"]) for c in cases), tuple(_text(c["output"]) for c in cases))


def _lines_args(value: Any, where: str, name: str) -> list:
    """LiveCodeBench functional input: one JSON value per line, one line per argument."""
    if not isinstance(value, str):
        return _args(value)
    try:
        return [json.loads(line) for line in value.splitlines() if line.strip()]
    except ValueError:
        raise ValueError(f"{where}: field '{name}': a functional test input must be one JSON value per line") from None


def _ground_truth_suite(value: Any, where: str, fn_name: str | None, entry_point: str | None) -> TestSuite:
    name = "reward_model.ground_truth"
    value = _plain(_json(value, where, name))
    if isinstance(value, Mapping):
        return _io_suite(value, where, name, fn_name)
    if isinstance(value, str):
        return _assert_suite([value], where, name, entry_point)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return _assert_suite(value, where, name, None)
    if isinstance(value, list) and value:
        return _cases_suite(value, where, name, fn_name)
    raise ValueError(f"{where}: field '{name}' holds no test cases")


def _assert_suite(scripts: Sequence[str], where: str, name: str, entry_point: str | None, setup: str = "") -> TestSuite:
    scripts = [str(s) for s in scripts if str(s).strip()]
    if not scripts:
        raise ValueError(f"{where}: field '{name}' holds no tests")
    if entry_point:  # HumanEval: the script defines check(candidate)
        scripts = [s + f"\n\ncheck({entry_point})\n" for s in scripts]
    return TestSuite("assert", tuple(scripts), setup=setup)


def _contests_suite(row: Mapping[str, Any], where: str) -> TestSuite:
    inputs, outputs = [], []
    for name in CONTESTS_FIELDS:
        block = row_field(row, (name,))
        if block is None:
            continue
        block = _plain(_json(block[1], where, name))
        if not isinstance(block, Mapping) or len(block.get("input") or []) != len(block.get("output") or []):
            raise ValueError(f"{where}: field '{name}' needs 'input' and 'output' lists of the same length")
        inputs += [_text(i) for i in block["input"]]
        outputs += [_text(o) for o in block["output"]]
    return TestSuite("stdio", tuple(inputs), tuple(outputs))


def row_tests(row: Mapping[str, Any], where: str) -> TestSuite:
    """The row's tests, from the first test layout it has (module docstring)."""
    lower = {str(k).lower() for k in row}
    fn = row_field(row, ("fn_name",))
    entry = row_field(row, ("entry_point",))
    fn_name, entry_point = (str(fn[1]) if fn else None), (str(entry[1]) if entry else None)
    if "reward_model" in lower:
        gt = row_field(row, ("reward_model.ground_truth",))
        if gt is None:
            raise ValueError(f"{where}: missing field 'reward_model.ground_truth'")
        suite = _ground_truth_suite(gt[1], where, fn_name or entry_point, entry_point)
    elif (io := row_field(row, ("input_output",))) is not None:
        value = _plain(_json(io[1], where, "input_output"))
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: field 'input_output' must be an object with 'inputs' and 'outputs'")
        suite = _io_suite(value, where, "input_output", fn_name)
    elif lower & set(CONTESTS_FIELDS):
        suite = _contests_suite(row, where)
    elif (tl := row_field(row, ("test_list",))) is not None:
        setup = row_field(row, ("test_setup_code",))
        suite = _assert_suite(list(_plain(tl[1])), where, "test_list", None, str(setup[1]) if setup else "")
    elif (t := row_field(row, ("test",))) is not None:
        if not entry_point:
            raise ValueError(f"{where}: field 'test' (HumanEval layout) needs 'entry_point'")
        suite = _assert_suite([str(t[1])], where, "test", entry_point)
    else:
        raise ValueError(f"{where}: missing field 'tests' (expected one of {', '.join(TEST_FIELDS)}, "
                         f"private_tests, generated_tests)")
    if len(suite) == 0:
        raise ValueError(f"{where}: no test cases")
    return suite


def parse_row(row: Mapping[str, Any], where: str) -> tuple[list[dict[str, str]], TestSuite, str | None]:
    """``(messages, tests, data_source)`` from one row; a ``starter_code`` is appended to the
    last user message."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(row).__name__}")
    q = row_field(row, QUESTION_FIELDS)
    if q is None:
        raise ValueError(f"{where}: missing field 'question' (expected one of {', '.join(QUESTION_FIELDS)})")
    messages = chat_messages(_plain(q[1]), where)
    starter = row_field(row, ("starter_code",))
    if starter is not None and str(starter[1]).strip():
        last = messages[-1]
        messages[-1] = {**last, "content": f"{last['content']}\n\nStart from this code:\n```python\n{starter[1]}\n```"}
    source = row_field(row, ("data_source",))
    return messages, row_tests(row, where), (str(source[1]) if source else None)


# -- the task ------------------------------------------------------------------------------------


class CodeTask(FileTask):
    """Code-generation RL task (implements ``trainer.tasks.base.Task``).

    Data order, benchmarks and prompt length as :class:`trainer.tasks.math.FileTask`;
    ``limits`` are the sandbox limits, ``workers`` the sandboxes run at once per batch,
    ``max_tests`` keeps the first N tests of each problem (0 = all). ``score_many`` scores a
    batch and returns the sandbox outcome counts (``trainer.tasks.verify.score_batch`` uses it).
    """

    name = "code"
    score_is_safe = True  # every call is bounded by the sandbox's own wall clock and never raises for bad code
    isolated_scorer = None  # the sandbox is already a killable process
    isolated_preload: tuple[str, ...] = ()

    def __init__(
        self,
        train_path: str | Path,
        benchmark_paths: Mapping[str, str | Path] | None = None,
        tokenizer: Any = None,
        system_prompt: str | None = PAPER_CODE_SYSTEM_PROMPT,
        use_chat_template: bool = True,
        max_prompt_tokens: int | None = None,
        limits: Limits = Limits(),
        workers: int = 4,
        max_tests: int = 0,
    ):
        self.limits, self.workers, self.max_tests = limits, max(1, workers), max_tests  # load() reads max_tests
        super().__init__(train_path, benchmark_paths, tokenizer, system_prompt, use_chat_template, max_prompt_tokens)

    def load(self, path: str | Path, source: str | None = None) -> list[Problem]:
        """Problems from one file; ``source`` overrides each row's ``data_source``."""
        out = []
        for where, row in read_records(path):
            messages, tests, data_source = parse_row(row, f"{path}: {where}")
            if self.max_tests:
                tests = TestSuite(tests.kind, tests.inputs[: self.max_tests], tests.outputs[: self.max_tests],
                                  tests.fn_name, tests.setup)
            prompt = format_prompt(messages, self.tokenizer.hf, self.system_prompt, self.use_chat_template, plain_suffix="\n\n")
            meta = {"question": messages[-1]["content"], "where": where, "tests": tests}
            out.append(Problem(prompt, f"{len(tests)} {tests.kind} tests", source or data_source or Path(path).stem, meta))
        return out

    def run(self, response: str, problem: Problem) -> Result:
        """The sandbox result for one response (``no_code`` without a fenced block)."""
        code = extract_code(response)
        tests = problem.meta["tests"]
        return Result("no_code", 0, len(tests)) if code is None else run_candidate(code, tests, self.limits)

    def score(self, response: str, problem: Problem) -> float:
        return self.run(response, problem).reward

    def score_many(self, responses: Sequence[str], problems: Sequence[Problem]) -> tuple[list[float], dict[str, float]]:
        """Rewards for a batch, candidates run ``workers`` at a time, plus counts per outcome
        (``sandbox/*`` keys) and ``test_pass_sum``, the sum of per-response test pass rates."""
        codes = [extract_code(r) for r in responses]
        todo = [i for i, c in enumerate(codes) if c is not None]
        ran = run_many([(codes[i], problems[i].meta["tests"]) for i in todo], self.limits, self.workers)
        results = [Result("no_code", 0, len(p.meta["tests"])) for p in problems]
        for i, r in zip(todo, ran):
            results[i] = r
        stats: dict[str, float] = {key: 0.0 for key in OUTCOME_KEYS.values()}
        for r in results:
            stats[OUTCOME_KEYS[r.outcome]] += 1
        stats["test_pass_sum"] = float(sum(r.pass_rate for r in results))
        return [r.reward for r in results], stats


def build_code_task(cfg: RunConfig, common: dict, policy: RunPolicy | None = None) -> CodeTask:
    """The code task with the sandbox limits of ``cfg.code`` and the isolation mode, interpreter
    and uid of the operator's ``policy``; fails early (ConfigError) when isolation 'namespace'
    is required but unavailable or no interpreter runs in the sandbox."""
    import os

    from trainer.spec.config import ConfigError
    from trainer.spec.operator_policy import RunPolicy
    from trainer.tasks import make_task
    from trainer.tasks.sandbox import isolation, sandbox_python

    c, pol = cfg.code, policy or RunPolicy()
    audit_hook = "always" if "always" in (c.audit_hook, pol.sandbox_audit_hook) else "fallback"
    limits = Limits(timeout_s=c.timeout_s, test_timeout_s=c.test_timeout_s, memory_mb=c.memory_mb,
                    max_processes=c.max_processes, max_output_bytes=c.max_output_bytes,
                    network=pol.sandbox_isolation, audit_hook=audit_hook, run_as_uid=pol.sandbox_uid,
                    uid_count=pol.sandbox_uid_count, python=pol.sandbox_python)
    try:
        prefix, _ = isolation(limits)
        sandbox_python(limits.python, prefix, limits.run_as_uid if os.geteuid() == 0 else None)
    except RuntimeError as e:
        # an operator setting is wrong for this host: say which (AERO_SANDBOX_ISOLATION / _PYTHON)
        raise ConfigError([("code", f"{e} (operator setting "
                            f"{'AERO_SANDBOX_ISOLATION' if 'namespace' in str(e) else 'AERO_SANDBOX_PYTHON'})")]) from None
    return make_task("code", train_path=Path(cfg.train_data).expanduser(), limits=limits,
                     workers=c.workers or min(8, os.cpu_count() or 1), max_tests=c.max_tests, **common)
