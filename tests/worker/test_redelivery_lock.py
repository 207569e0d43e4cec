"""The lock of Redis' redelivery sweep cannot outlive a dead worker for long.

kombu's sweep (restore_visible) holds one key, ``unacked_mutex``, while it hands overdue messages
back; a worker SIGKILLed or frozen in that moment leaves the key behind until it expires, and no
worker redelivers anything meanwhile. This takes the lock as a sweep does, with the worker app's
own transport options on a real Redis, and leaves it held as a killed worker would."""

from __future__ import annotations

import redis
from kombu.transport.redis import Mutex, MutexHeld

from backend.settings import Settings
from worker.celery_app import UNACKED_MUTEX_EXPIRE_S, make_app
from worker.settings import WorkerSettings

REDIS = "redis://127.0.0.1:6379/14"  # a DB of its own: the e2e tests' workers sweep DB 11


def test_a_sweep_lock_left_by_a_killed_worker_expires_within_seconds():
    app = make_app(Settings(redis_url=REDIS), WorkerSettings())
    client = redis.Redis.from_url(REDIS)
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        key = channel.unacked_mutex_key
        client.delete(key)
        held = Mutex(channel.client, key, channel.unacked_mutex_expire)
        held.__enter__()  # never released: its holder was killed mid-sweep
        try:
            ttl = client.ttl(key)
            assert 0 < ttl <= UNACKED_MUTEX_EXPIRE_S <= 30, ttl  # kombu's default left it 300 s
            try:  # the next sweep of a live worker skips while the lock is held
                with Mutex(channel.client, key, channel.unacked_mutex_expire):
                    raise AssertionError("a second sweep took a held lock")
            except MutexHeld:
                pass
        finally:
            client.delete(key)
