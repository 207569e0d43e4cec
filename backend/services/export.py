"""GET /runs/{id}/export: a run's step metrics as one wide table (a row per step, a column per key)."""

from __future__ import annotations

import csv
import io

import pyarrow as pa
import pyarrow.parquet as pq

from backend.db.metrics import MetricColumns


def to_arrow(cols: MetricColumns) -> pa.Table:
    """Columns ``step`` (int64) then each metric key (float64; missing values null), keys sorted."""
    data = {"step": pa.array(cols.steps, type=pa.int64())}
    for key in sorted(cols.series):
        data[key] = pa.array([None if v is None else float(v) for v in cols.series[key]], type=pa.float64())
    return pa.table(data)


def to_parquet(cols: MetricColumns) -> bytes:
    buf = io.BytesIO()
    pq.write_table(to_arrow(cols), buf)
    return buf.getvalue()


def to_csv(cols: MetricColumns) -> str:
    """CSV with a header row; missing values are empty cells; floats in repr (round-trip) form."""
    keys = sorted(cols.series)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["step", *keys])
    for i, step in enumerate(cols.steps):
        w.writerow([step, *("" if cols.series[k][i] is None else repr(cols.series[k][i]) for k in keys)])
    return out.getvalue()
