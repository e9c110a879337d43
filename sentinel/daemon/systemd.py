"""systemd's notify protocol (Type=notify, WatchdogSec) without a dependency.

sd_notify is one datagram to the socket named in $NOTIFY_SOCKET; when Sentinel
is not started by systemd the variable is unset and every call is a no-op.
"""

from __future__ import annotations

import os
import socket


def notify(state: str) -> bool:
    """Send a state ("READY=1", "STOPPING=1", "WATCHDOG=1") to systemd; False if not under it."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    if path.startswith("@"):  # abstract namespace socket
        path = "\0" + path[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(path)
            sock.sendall(state.encode())
        except OSError:
            return False
    return True


def watchdog_interval_s() -> float | None:
    """Half the watchdog timeout systemd set for this process (ping at twice the rate), or None."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 1e6 / 2
    except ValueError:
        return None
