"""A small thread-safe LRU of response bodies, bounded by total bytes.

Used for GET /runs/{id}/metrics: its answer is a pure function of the run's stored steps,
so it is cached under the run's ``metrics_version`` (bumped by every step write) and status;
a new step makes a new key and the old entries age out. Finished runs never change, so
dashboards polling them cost one primary-key lookup per request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable


class ByteLRU:
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._data: OrderedDict[Hashable, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self._building: dict[Hashable, threading.Lock] = {}
        self.hits = self.misses = 0

    def get(self, key: Hashable) -> bytes | None:
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, value: bytes) -> None:
        if len(value) > self.max_bytes // 4:  # one huge answer must not flush everything else
            return
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._size -= len(old)
            self._data[key] = value
            self._size += len(value)
            while self._size > self.max_bytes:
                _, evicted = self._data.popitem(last=False)
                self._size -= len(evicted)

    def get_or_build(self, key: Hashable, build: Callable[[], bytes]) -> bytes:
        """The cached value, or ``build()`` stored under ``key``. Concurrent misses on the
        same key build once (the others wait), so a burst of identical requests after a new
        step costs one database read, not one per client."""
        value = self.get(key)
        if value is not None:
            return value
        with self._lock:
            gate = self._building.setdefault(key, threading.Lock())
        with gate:
            value = self.peek(key)
            if value is None:
                value = build()
                self.put(key, value)
        with self._lock:
            self._building.pop(key, None)
        return value

    def peek(self, key: Hashable) -> bytes | None:
        with self._lock:
            return self._data.get(key)

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._data)
