"""JsonlSink: one line per step, resume truncation, and a re-logged step replacing its line."""

import json

from trainer.platform.sinks import JsonlSink


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_relogging_a_step_replaces_its_line(tmp_path):
    sink = JsonlSink(tmp_path)
    for step in (1, 2, 3):
        sink.log(step, {"a": float(step)})
    sink.log_eval(2, {"overall": {"avg_at_k": 0.5}})
    sink.truncate_after(2)  # a resume from step 2
    assert [r["step"] for r in rows(sink.metrics_path)] == [1, 2]
    again = JsonlSink(tmp_path)  # a new process (the verl launcher re-forwards steps 1 and 2)
    again.log(1, {"a": 10.0})
    again.log(2, {"a": 20.0})
    again.log(3, {"a": 30.0})
    again.log_eval(2, {"overall": {"avg_at_k": 0.6}})
    assert rows(sink.metrics_path) == [{"step": 1, "a": 10.0}, {"step": 2, "a": 20.0}, {"step": 3, "a": 30.0}]
    assert rows(sink.evals_path) == [{"step": 2, "results": {"overall": {"avg_at_k": 0.6}}}]
    sink2 = JsonlSink(tmp_path)
    sink2.log(4, {"a": float("nan")})
    assert rows(sink.metrics_path)[-1] == {"step": 4, "a": None}
