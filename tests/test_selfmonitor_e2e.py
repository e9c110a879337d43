"""Sentinel watched from outside: systemd's notify protocol over a real NOTIFY_SOCKET
datagram socket, and the Watchdog alert (dead man's switch) repeating on its route."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fixtures_e2e import wait_for, write_config
from notify_helpers import LoopbackReceiver

pytestmark = pytest.mark.integration

NO_RULES = "groups: []\n"
# A target nobody listens on: the config needs one; no rule reads it.
DEAD = "http://127.0.0.1:9"


def _receive(sock: socket.socket, seconds: float, enough: Callable[[list[str]], bool]
             ) -> list[str]:
    """Datagrams until `enough` says so or `seconds` pass."""
    got: list[str] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until and not enough(got):
        try:
            got.append(sock.recv(4096).decode())
        except TimeoutError:
            continue
    return got


def test_the_watchdog_is_fed_at_twice_systemds_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    from sentinel.daemon.systemd import watchdog_interval_s

    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")  # WatchdogSec=1s
    assert watchdog_interval_s() == 0.5
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert watchdog_interval_s() == 0.5
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))  # meant for another process
    assert watchdog_interval_s() is None
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    monkeypatch.setenv("WATCHDOG_USEC", "soon")
    assert watchdog_interval_s() is None


def test_ready_watchdog_and_stopping_reach_systemd(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, [("idle", DEAD)], None, NO_RULES)
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(0.2)
        # WatchdogSec=1s: Sentinel pings at twice the rate.
        env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="1000000")
        env.pop("WATCHDOG_PID", None)
        # Its log to a file: a pipe read only at the end fills up and blocks the daemon.
        with (tmp_path / "daemon.log").open("w") as log:
            proc = subprocess.Popen([sys.executable, "-m", "sentinel", "run", "-c", str(cfg)],
                                    env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            first = _receive(sock, 120, bool)  # start-up: slow on a loaded machine
            assert first[:1] == ["READY=1"], first
            # The rate (0.5 s for WatchdogSec=1s) is test_the_watchdog_is_fed_at_twice_
            # systemds_rate: timing it here raced a loaded machine.
            pings = _receive(sock, 60, lambda got: got.count("WATCHDOG=1") >= 3)
            assert pings.count("WATCHDOG=1") >= 3, pings
            proc.send_signal(signal.SIGTERM)
            after = _receive(sock, 60, lambda got: "STOPPING=1" in got)
            assert "STOPPING=1" in after, after
            assert proc.wait(60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(60)
    assert "Traceback" not in (tmp_path / "daemon.log").read_text(errors="replace")


def test_watchdog_alert_repeats_on_its_short_route(tmp_path: Path,
                                                  loopback: LoopbackReceiver) -> None:
    cfg = write_config(tmp_path, [("idle", DEAD)], loopback.url(), NO_RULES)
    with cfg.open("a") as f:
        f.write("notify:\n"
                "  watchdog: true\n"
                "  route:\n"
                "    receiver: oncall\n"
                "    group_wait: 0s\n"
                "    routes:\n"
                "      - matchers: ['alertname=\"Watchdog\"']\n"
                "        receiver: oncall\n"
                "        group_wait: 0s\n"
                "        group_interval: 1s\n"
                "        repeat_interval: 2s\n")
    proc = subprocess.Popen([sys.executable, "-m", "sentinel", "run", "-c", str(cfg)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def watchdog_pages() -> list[dict]:
            return [b for b in (r.json() for r in loopback.accepted())
                    if any(a["labels"]["alertname"] == "Watchdog" for a in b["alerts"])]

        wait_for(lambda: len(watchdog_pages()) >= 3, 120, "three Watchdog pages")
        pages = watchdog_pages()
        assert all(b["status"] == "firing" for b in pages)
        keys = {r.headers.get("Idempotency-Key") for r in loopback.accepted()}
        assert len(keys) >= 3, "each repeat is a new message, not a retry of one"
    finally:
        proc.terminate()
        proc.wait(60)
