"""DbSink.log_detail: a step's rollout sample and histograms reach the store (background
writer and inline), a re-logged step replaces its row, a resume drops the ones past the
checkpoint, and a failed write does not stop the run."""

from __future__ import annotations

from backend.db.rollouts import RolloutFilter, detail_steps, read_histograms, read_rollouts
from backend.db.session import session_scope
from worker.sink import DbSink


def detail(n: int, text: str = "ok") -> dict:
    rows = [{"group": 0, "row": i, "prompt": "1+1=", "response": text, "reward": 1.0, "correct": True, "advantage": 0.5,
             "stratum": "high", "round": 0, "stage": "explore", "length": 2, "truncated": False, "clipped": False}
            for i in range(n)]
    return {"rollouts": rows, "histograms": {"length": {"lo": 0.0, "hi": 8.0, "counts": [n] + [0] * 15}}}


def steps(url, rid):
    with session_scope(url) as s:
        return detail_steps(s, rid)


def test_details_written_in_the_background_and_replaced(db_url, make_run):
    rid = make_run()
    sink = DbSink(db_url, rid, flush_s=10.0)
    for step in (1, 2, 3):
        sink.log(step, {"reward/mean": 0.1 * step})
        sink.log_detail(step, detail(step))
    sink.log_detail(2, detail(5, text="again"))  # a resumed run re-logs step 2
    sink.flush()  # waits for the writer thread
    assert steps(db_url, rid) == [1, 2, 3]
    with session_scope(db_url) as s:
        count, rows = read_rollouts(s, rid, 2, RolloutFilter(), 0, 10)
        assert count == 5 and rows[0]["response"] == "again"
        assert [h["length"]["counts"][0] for _, h in read_histograms(s, rid)] == [1, 5, 3]
    sink.truncate_after(1)  # resume from the checkpoint of step 1
    assert steps(db_url, rid) == [1]
    sink.close()


def test_a_failed_detail_write_is_logged_not_raised(db_url, make_run, caplog):
    rid = make_run()
    sink = DbSink(db_url, rid, background=False)
    sink.log_detail(1, {"rollouts": [{"response": object()}], "histograms": {}})  # not JSON: the write fails
    assert "storing the rollout sample of step 1 failed" in caplog.text
    sink.log_detail(2, detail(1))
    sink.close()
    assert steps(db_url, rid) == [2]
