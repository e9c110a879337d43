"""systemd's notify protocol (Type=notify, WatchdogSec) without a dependency.

sd_notify is one datagram to the socket named in $NOTIFY_SOCKET; when Sentinel
is not started by systemd the variable is unset and every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


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


class WatchdogPinger:
    """Feeds systemd's watchdog from a thread of its own, while `healthy()` says so.

    Off the threads that do the work (issue 49: as an APScheduler job it shared their
    pool and their lateness, and an alert storm left the watchdog unfed for 152 s, so
    the unit's WatchdogSec=60s would have restarted Sentinel into the same storm). What
    it says is decided by `healthy` (heartbeat.py): busy is healthy, wedged is not.
    """

    def __init__(self, interval_s: float, healthy: Callable[[], str | None],
                 send: Callable[[str], bool] = notify) -> None:  # noqa: D107
        self.interval_s = interval_s
        self._healthy = healthy
        self._send = send
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start pinging every `interval_s` (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sentinel-watchdog",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop pinging (systemd then sees STOPPING=1, sent by the App)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                if self._healthy() is None:  # unhealthy: logged by healthy(), not fed here
                    self._send("WATCHDOG=1")
            except Exception:  # never let the pinger die: a dead pinger restarts Sentinel
                log.exception("watchdog health check failed")
