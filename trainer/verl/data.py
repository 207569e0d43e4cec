"""Write the run's math data as verl parquet (what verl's RLHFDataset reads).

Input: the platform's files in any layout trainer/tasks/math.py accepts (verl parquet/JSONL,
flat AIME24 / AMC23 / MATH-500 / Minerva / OlympiadBench). Output rows:

    prompt        [{"role": "system", "content": PAPER_MATH_SYSTEM_PROMPT}, *messages]
                  (the row's own system message wins); verl applies the model's chat template
    data_source   the row's source for training; the benchmark's name for benchmarks, so verl's
                  validation metrics and our per-benchmark results are keyed by it
    reward_model  {"style": "rule", "ground_truth": answer}
    extra_info    {"index": i, "where": "line N" / "row N"}

Parsing is trainer.tasks.math.parse_row, the one place that knows the layouts.
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


def prepare(train_data: str | Path, benchmarks: Mapping[str, str | Path], out_dir: str | Path) -> tuple[Path, list[Path]]:
    """Write OUT/verl_data/train.parquet and one parquet per benchmark (named by its index, the
    benchmark name travelling as data_source). Returns (train file, benchmark files in order)."""
    d = Path(out_dir) / "verl_data"
    train = write_parquet(verl_rows(Path(train_data).expanduser()), d / "train.parquet")
    vals = [write_parquet(verl_rows(Path(p).expanduser(), source=name), d / f"val_{i}.parquet")
            for i, (name, p) in enumerate(benchmarks.items())]
    return train, vals
