"""A free TCP port for a server a test starts.

Not from the kernel's ephemeral range: Ray's processes (raylet, object manager, agents) and every
outgoing connection take ports from there while a test runs, so a port found free there can be
taken before the server binds it (a Ray head once failed with "Address already in use" seconds
after its port was chosen). The gap between Ray's worker ports (10002-19999) and the start of
the ephemeral range is bound only by whoever names a port, as these tests do.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

RAY_WORKER_PORTS_END = 19999


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port(host: str = "") -> int:
    """A port that nothing holds now, outside the ephemeral range and Ray's worker ports."""
    low, high = RAY_WORKER_PORTS_END + 1, _ephemeral_start() - 1
    for port in random.sample(range(low, high + 1), min(200, high - low + 1)):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {low}-{high}")
