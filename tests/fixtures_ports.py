"""Ports for servers whose address a test must choose before they start.

Where a server can bind port 0 and say which port it got, tests do that. Where
the port must be chosen first (a tutorial's literal commands, a daemon kept on
one port across restarts, a PostgreSQL cluster), `free_port` picks one below
the kernel's ephemeral range. A port found by binding 0 comes from that range,
and between its release and the server's bind any outgoing connection on the
machine may take it as its source port: beside stress-ng, with six workers
connecting all the time, `sentinel run` of the tutorial test never became
ready. Each xdist worker draws from its own slice, and a process never hands
out a port twice, so two tests never pick the same port either.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_LOW = 10000
_SLICES = 16
_given: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port nobody is bound to, outside the ephemeral range where it can."""
    span = (_ephemeral_low() - _LOW) // _SLICES
    if span < 100:  # the ephemeral range starts low: nothing is outside it
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
    start = _LOW + (int(worker) if worker.isdigit() else 0) % _SLICES * span
    candidates = [p for p in range(start, start + span) if p not in _given]
    if not candidates:  # every port of the slice handed out: the old tests are over
        _given.clear()
        candidates = list(range(start, start + span))
    random.shuffle(candidates)
    for port in candidates:
        if _bindable(port):
            _given.add(port)
            return port
    raise RuntimeError(f"no free port in {start}-{start + span - 1}")
