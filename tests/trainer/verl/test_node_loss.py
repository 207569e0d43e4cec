"""run_verl's node-loss rules without a cluster (the real thing: test_multinode.py): which errors
say a peer died, and the error a run that lost a node fails with."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("ray")

from trainer.platform import placement  # noqa: E402
from trainer.verl import runner  # noqa: E402


class Relay:
    def __init__(self, last_step: int):
        self.last_step, self.pumped = last_step, 0

    def pump(self) -> int:
        self.pumped += 1
        return 0


def where(*nodes: tuple[str, str]):
    return SimpleNamespace(nodes=[n for n, _ in nodes], node_ips=[ip for _, ip in nodes], cluster="10.0.0.1:6379")


def config(tmp_path, step: int | None):
    if step is not None:
        (tmp_path / "latest_checkpointed_iteration.txt").write_text(f"{step}\n")
    return SimpleNamespace(trainer=SimpleNamespace(default_local_dir=str(tmp_path)))


def test_died_reads_ray_errors_and_their_causes():
    from ray.exceptions import ActorDiedError, NodeDiedError, RayTaskError

    assert runner.died(ActorDiedError())
    assert runner.died(NodeDiedError("node gone"))
    # the task runner's error wrapping a worker's: verl calls its ranks from inside the runner
    assert runner.died(RayTaskError("run", "Traceback ...", ActorDiedError()))
    assert runner.died(RayTaskError("run", "Traceback ...", RuntimeError("[../gloo/transport/tcp/pair.cc] "
                                                                         "Connection closed by peer")))
    assert not runner.died(RayTaskError("run", "Traceback ...", ValueError("a bug in a method")))
    assert not runner.died(ValueError("a bug in a method"))


def test_a_lost_node_is_named_with_the_checkpoint_a_retry_resumes_from(monkeypatch, tmp_path):
    head, other = ("a" * 56, "10.0.0.1"), ("b" * 56, "10.0.0.2")
    monkeypatch.setattr(runner, "lost_nodes", lambda w: [other])
    relay = Relay(last_step=7)
    with pytest.raises(placement.NodeLost) as err:
        runner.check_nodes(where(head, other), config(tmp_path, 6), relay, cause=KeyError("x"))
    text = str(err.value)
    assert f"node 10.0.0.2 (Ray node id {'b' * 56}) of the run's 2 nodes left the Ray cluster after step 7" in text
    assert "resumes from its last checkpoint, step 6" in text
    assert isinstance(err.value, RuntimeError) and isinstance(err.value.__cause__, KeyError)
    assert relay.pumped == 1  # the steps logged before the loss reach the sink first


def test_without_a_checkpoint_the_retry_starts_over(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "lost_nodes", lambda w: [("b" * 56, "10.0.0.2")])
    with pytest.raises(placement.NodeLost, match="it has none yet, so from step 1"):
        runner.check_nodes(where(("a" * 56, "10.0.0.1"), ("b" * 56, "10.0.0.2")), config(tmp_path, None), Relay(0))


def test_nodes_all_alive_raise_nothing_and_a_wait_is_bounded(monkeypatch, tmp_path):
    import time

    monkeypatch.setattr(runner, "lost_nodes", lambda w: [])
    monkeypatch.setattr(runner, "POLL_S", 0.01)
    t0 = time.monotonic()
    runner.check_nodes(where(("a" * 56, "10.0.0.1")), config(tmp_path, 3), Relay(3), wait_s=0.2)
    assert 0.2 <= time.monotonic() - t0 < 5
