"""Enqueueing by task name reaches a real broker: Redis, and the embedded SQLite broker.
A kombu consumer (what a Celery worker runs) reads back the task name and the run id."""

import secrets

import pytest
import redis
from kombu import Connection

from backend.queue import TRAIN_TASK, celery_client, enqueue_run
from backend.services.configs import queue_for
from backend.settings import Settings, broker_url
from trainer.spec.config import RunConfig

REDIS = "redis://127.0.0.1:6379/15"


def _consume_one(url: str, queue: str):
    with Connection(url) as conn:
        q = conn.SimpleQueue(queue)
        try:
            msg = q.get(timeout=10)
            msg.ack()
            return msg.headers["task"], msg.decode()[0]
        finally:
            q.close()


def test_broker_url_choice(tmp_path):
    assert broker_url(Settings(data_dir=tmp_path, redis_url="redis://h:1/0")) == "redis://h:1/0"
    assert broker_url(Settings(data_dir=tmp_path)) == f"sqla+sqlite:///{tmp_path.resolve()}/broker.sqlite"
    assert broker_url(Settings(data_dir=tmp_path)).startswith("sqla+sqlite:////")  # absolute path


def test_queue_for():
    assert queue_for(RunConfig()) == "cpu" and queue_for(RunConfig(device="cuda")) == "gpu"
    assert queue_for(RunConfig(engine="verl", preset=None, model_path="/m"), "c", "g") == "g"
    assert queue_for(RunConfig(rollout={"sampler": "vllm"})) == "cpu"  # device auto: falls back without CUDA
    assert queue_for(RunConfig(rollout={"sampler": "vllm"}, device="cuda")) == "gpu"
    assert queue_for(RunConfig(engine="verl", device="cpu"), "c", "g") == "c"  # verl on the CPU: a CPU worker


def test_enqueue_over_redis(tmp_path):
    try:
        redis.Redis.from_url(REDIS).ping()
    except redis.ConnectionError:
        pytest.fail("Redis at 127.0.0.1:6379 is not reachable")
    queue = f"test-cpu-{secrets.token_hex(4)}"
    try:
        enqueue_run(Settings(data_dir=tmp_path, redis_url=REDIS), 42, queue)
        assert _consume_one(REDIS, queue) == (TRAIN_TASK, [42])
    finally:
        r = redis.Redis.from_url(REDIS)
        for key in r.keys(f"*{queue}*"):
            r.delete(key)


def test_enqueue_over_the_embedded_sqlite_broker(tmp_path):
    settings = Settings(data_dir=tmp_path)
    enqueue_run(settings, 7, "cpu")
    enqueue_run(settings, 8, "cpu")
    assert (tmp_path / "broker.sqlite").exists()
    url = broker_url(settings)
    assert [_consume_one(url, "cpu"), _consume_one(url, "cpu")] == [(TRAIN_TASK, [7]), (TRAIN_TASK, [8])]


def test_unreachable_broker_raises_quickly(tmp_path):
    import time

    t0 = time.monotonic()
    with pytest.raises(Exception):
        celery_client("redis://127.0.0.1:1/0").send_task(TRAIN_TASK, args=[1], queue="cpu")
    assert time.monotonic() - t0 < 15
