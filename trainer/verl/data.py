"""Write the run's data as verl parquet (what verl's RLHFDataset reads): the math task's files,
or a generated task's seeded stream (arithmetic, countdown: their shipped presets).

Math input: the platform's files in any layout trainer/tasks/math.py accepts (verl parquet/JSONL,
flat AIME24 / AMC23 / MATH-500 / Minerva / OlympiadBench). Output rows:

    prompt        [{"role": "system", "content": PAPER_MATH_SYSTEM_PROMPT}, *messages]
                  (the row's own system message wins); verl applies the model's chat template
    data_source   the row's source for training; the benchmark's name for benchmarks, so verl's
                  validation metrics and our per-benchmark results are keyed by it
    reward_model  {"style": "rule", "ground_truth": answer}
    extra_info    {"index": i, "where": "line N" / "row N"}

Parsing is trainer.tasks.math.parse_row, the one place that knows the layouts.

Generated tasks (:func:`generated_rows`): the training parquet holds the first
``steps x batch_prompts x rounds`` problems of the run's training stream *in stream order*
(``data.shuffle`` is off for it, trainer/verl/overrides.py), so verl's step t trains on exactly
the prompts the embedded engine's step t does; each benchmark parquet holds the first
``eval_problems`` problems of that held-out set. A prompt is one user message whose content is
the problem ("37+85="); the tiny model's chat template (trainer/verl/model_dir.py) renders it as
BOS + characters, the embedded task's encoding. ``extra_info.task`` (the task's name) and
``extra_info.problem`` (the prompt) tell the reward function (trainer/verl/reward.py) to score
by that task's own verifier.

For a real model (an installed preset such as ``smollm2-135m``) the same problems are asked in
words: the user message is the task's ``question(problem)`` ("What is 37 + 85? Answer with just
the number."), verl renders it through the model's own chat template as the embedded task does
(trainer/tasks/chat_format.py), and ``extra_info.chat`` makes the reward read the free-text answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping
from trainer.tasks.math import PAPER_MATH_SYSTEM_PROMPT, parse_row, read_records


def verl_rows(path: str | Path, source: str | None = None, system_prompt: str | None = PAPER_MATH_SYSTEM_PROMPT) -> list[dict]:
    rows = []
    for i, (where, row) in enumerate(read_records(path)):
        messages, answer, data_source = parse_row(row, f"{path}: {where}")
        if system_prompt and not any(m["role"] == "system" for m in messages):
            messages = [{"role": "system", "content": system_prompt}, *messages]
        rows.append({"prompt": messages, "data_source": source or data_source or Path(path).stem,
                     "reward_model": {"style": "rule", "ground_truth": answer},
                     "extra_info": {"index": i, "where": where}})
    return rows


def write_parquet(rows: list[dict], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def generated_rows(task, problems, source: str | None = None) -> list[dict]:
    """verl rows of a generated task's problems (module docstring); ``task`` is the built task."""
    chat = task.chat is not None
    return [{"prompt": [{"role": "user", "content": task.question(p) if chat else p.prompt}],
             "data_source": source or p.source,
             "reward_model": {"style": "rule", "ground_truth": p.answer},
             # where: the problem's stable id (a finite training set's "item j"), the methods'
             # prompt key as on the embedded engine; None for a stream's problems, as there
             "extra_info": {"index": i, "where": p.meta.get("where"), "task": task.name,
                            "problem": p.prompt, "chat": chat}}
            for i, p in enumerate(problems)]


def stream_length(cfg) -> int:
    """Training problems a run can draw: every step's batch, DAPO's extra batches included."""
    from trainer.methods.spec import get_method

    return cfg.steps * cfg.batch_prompts * get_method(cfg.method).verl.prompt_batches(cfg)


def prepare_generated(cfg, out_dir: str | Path) -> tuple[Path, list[Path]]:
    # the embedded engine's own task for the preset (char tokenizer, or a real model's chat
    # format): the same stream, benchmarks and prompt-length check on both engines
    from trainer.embedded.presets import build_generated_task, preset_dir

    task = build_generated_task(cfg, preset_dir(cfg.preset))
    d = Path(out_dir) / "verl_data"
    train = write_parquet(generated_rows(task, task.train_problems(0, stream_length(cfg), cfg.seed), cfg.task),
                          d / "train.parquet")
    vals = [write_parquet(generated_rows(task, problems, source=name), d / f"val_{i}.parquet")
            for i, (name, problems) in enumerate(task.benchmarks().items())]
    return train, vals


def prepare(cfg, out_dir: str | Path) -> tuple[Path, list[Path]]:
    """Write OUT/verl_data/train.parquet and one parquet per benchmark (named by its index, the
    benchmark name travelling as data_source). Returns (train file, benchmark files in order)."""
    from trainer.tasks.registry import get_task_spec

    if get_task_spec(cfg.task).source == "generated":
        return prepare_generated(cfg, out_dir)
    return prepare_math(cfg.train_data, cfg.benchmarks, out_dir)


def prepare_math(train_data: str | Path, benchmarks: Mapping[str, str | Path], out_dir: str | Path) -> tuple[Path, list[Path]]:
    """The math task's files as verl parquet (:func:`prepare`)."""
    d = Path(out_dir) / "verl_data"
    train = write_parquet(verl_rows(Path(train_data).expanduser()), d / "train.parquet")
    vals = [write_parquet(verl_rows(Path(p).expanduser(), source=name), d / f"val_{i}.parquet")
            for i, (name, p) in enumerate(benchmarks.items())]
    return train, vals
