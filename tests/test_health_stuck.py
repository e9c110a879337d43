"""/healthz fails when a periodic worker is stuck, and the systemd watchdog stops being fed.

The must-show test runs a real App on loopback: the notify worker sends the
Watchdog alert through the real outbox and sender to a webhook receiver on
127.0.0.1, through a receiver wrapper that blocks on purpose until the test
lets it go (a receiver that hangs past every timeout: slow DNS, a stuck TLS
handshake, a trickling body). /healthz is fetched over HTTP; the watchdog pings
arrive on a real NOTIFY_SOCKET datagram socket.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import wait_for, write_config
from notify_helpers import LoopbackReceiver

from sentinel.daemon.heartbeat import Beat, Heartbeats, stuck
from sentinel.model import Notification
from sentinel.respond.notify.base import DeliveryResult, Receiver

# -- the registry: pure, time passed in ------------------------------------


def test_a_worker_is_stuck_only_after_three_of_its_intervals() -> None:
    beats = [Beat("notify", 1.0, last_s=100.0, runs=5), Beat("rules:vllm", 15.0, last_s=90.0)]
    assert stuck(beats, 102.9) == []
    assert stuck(beats, 103.0) == []  # exactly 3 intervals: not yet
    (s,) = stuck(beats, 103.5)
    assert (s.worker, s.interval_s, s.silent_s, s.runs) == ("notify", 1.0, 3.5, 5)
    assert [s.worker for s in stuck(beats, 136.0)] == ["notify", "rules:vllm"]


def test_beats_keep_a_worker_alive_and_forgotten_workers_are_ignored() -> None:
    hb = Heartbeats()
    hb.expect("housekeeping", 30.0, since_s=10.0)  # due to run first at 10 s
    assert hb.stuck(99.0) == []
    assert [s.worker for s in hb.stuck(101.0)] == ["housekeeping"]
    hb.beat("housekeeping", 100.0)
    assert hb.stuck(189.0) == []
    hb.beat("housekeeping", 50.0)  # a late report never moves the last run back
    assert hb.stuck(189.0) == []
    hb.forget("housekeeping")
    hb.beat("housekeeping", 500.0)  # a run that finishes after its job was removed
    assert hb.beats() == []
    assert hb.unhealthy(1e6, 1e9) is None


def test_unhealthy_says_which_worker_and_since_when() -> None:
    hb = Heartbeats()
    hb.expect("notify", 1.0, since_s=0.0)
    hb.beat("notify", 10.0)
    why = hb.unhealthy(14.5, now_wall_s=1_800_000_004.5)
    assert why == ("notify: has not completed a run for 4.5s (interval 1s), "
                   "since 2027-01-15T08:00:00+00:00")
    hb.expect("rules:x", 2.0, since_s=20.0)
    assert "rules:x: has not completed its first run" in (hb.unhealthy(30.0, 2e9) or "")


def test_the_scheduler_listener_watches_jobs_from_their_first_run_until_removed() -> None:
    from datetime import UTC, datetime, timedelta

    from apscheduler.schedulers.background import BackgroundScheduler

    from sentinel.daemon.heartbeat import HEARTBEAT_EVENTS

    hb = Heartbeats()
    sched = BackgroundScheduler(timezone="UTC")
    sched.add_listener(hb.scheduler_listener(sched, lambda job_id: job_id != "ignored"),
                       HEARTBEAT_EVENTS)
    ran = threading.Event()
    sched.add_job(ran.set, "interval", seconds=3600, id="now", next_run_time=datetime.now(UTC))
    added = time.monotonic()  # before "later" is due in 600 s
    sched.add_job(ran.set, "interval", seconds=3600, id="later",
                  next_run_time=datetime.now(UTC) + timedelta(seconds=600))
    sched.add_job(ran.set, "interval", seconds=1, id="ignored")
    sched.start()
    try:
        wait_for(lambda: any(b.runs for b in hb.beats()), 5, "the first job to run")
        beats = {b.worker: b for b in hb.beats()}
        assert set(beats) == {"now", "later"}
        assert beats["now"].interval_s == 3600 and beats["now"].runs == 1
        # Not due for 10 minutes: its 3 intervals count from then. Against the instant it
        # was added, not the test's 'now': however late a loaded machine gets here.
        assert beats["later"].last_s - added > 590
        sched.remove_job("later")
        assert [b.worker for b in hb.beats()] == ["now"]
    finally:
        sched.shutdown(wait=False)


# -- the must-show test: a real App, its notify worker blocked on purpose ----


class BlockingReceiver:
    """Wraps a real receiver; `send` blocks while `gate` is closed, then delivers for real."""

    def __init__(self, real: Receiver) -> None:
        self.real = real
        self.name = real.name
        self.gate = threading.Event()
        self.entered = threading.Event()

    def send(self, notification: Notification, now_ms: int) -> DeliveryResult:
        if not self.gate.is_set():
            self.entered.set()
            self.gate.wait(60)
        return self.real.send(notification, now_ms)


def _wait_pings(sock: socket.socket, n: int, timeout_s: float = 30.0) -> None:
    """Wait until `n` WATCHDOG=1 datagrams arrived (a generous deadline: a loaded machine
    delays the pings, it does not make them wrong)."""
    got = 0
    deadline = time.monotonic() + timeout_s
    while got < n:
        assert time.monotonic() < deadline, f"{got} of {n} watchdog pings in {timeout_s:.0f}s"
        try:
            got += sock.recv(64) == b"WATCHDOG=1"
        except TimeoutError:
            continue


def _watchdog_pings(sock: socket.socket, seconds: float) -> int:
    """WATCHDOG=1 datagrams received in the next `seconds`."""
    n = 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        try:
            n += sock.recv(64) == b"WATCHDOG=1"
        except TimeoutError:
            continue
    return n


@pytest.mark.integration
def test_healthz_fails_while_the_notify_worker_is_blocked_and_recovers(
        tmp_path: Path, loopback: LoopbackReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    from sentinel.config import load_config
    from sentinel.daemon.app import App

    cfg = write_config(tmp_path, [("idle", "http://127.0.0.1:9")], loopback.url(),
                       "groups: []\n")
    text = cfg.read_text().replace("timeout: 2s", "timeout: 500ms")
    cfg.write_text(text + "notify:\n  watchdog: true\n  interval: 1s\n")
    sock_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(0.1)
    monkeypatch.setenv("NOTIFY_SOCKET", sock_path)
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")  # pinged every 0.5 s while healthy
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    loopback.status = 503  # the Watchdog alert stays in the outbox, retried every second
    app = App(load_config(cfg))
    app.start()
    try:
        assert app.notifier is not None and app.status is not None
        assert app.notifier.heartbeat_interval_s == 1.0  # max(interval, receiver timeout)
        wait_for(lambda: loopback.requests, 30, "the first (failed) attempt to send")
        blocker = BlockingReceiver(app.notifier.sender.receivers["oncall"])
        app.notifier.sender.receivers["oncall"] = blocker
        host, port = app.status.address
        healthz = f"http://{host}:{port}/healthz"
        assert httpx.get(healthz).status_code == 200
        _wait_pings(sock, 2)  # fed while healthy

        assert blocker.entered.wait(30), "the notify worker never sent the Watchdog alert"
        # Unhealthy once its last run is three intervals old (the boundary itself is
        # test_a_worker_is_stuck_only_after_three_of_its_intervals, on a passed clock):
        # here the daemon's own reading must say more than three intervals.
        first_bad = wait_for(lambda: (r := httpx.get(healthz)).status_code == 503 and r, 30,
                             "/healthz to fail")
        body = first_bad.text
        silent = re.search(r"^notify: has not completed a run for (\d+\.\d+)s \(interval 1s\), "
                           r"since 20\d\d-\d\d-\d\dT", body, re.M)
        # Shown to a tenth of a second: 3.04 s reads "3.0s" (the daemon judged > 3.0).
        assert silent and float(silent.group(1)) >= 3.0, body
        assert body.count("\n") == 2, f"only the notify worker is stuck: {body}"
        metrics = httpx.get(f"http://{host}:{port}/metrics").text
        last = re.search(r'^sentinel_worker_last_run_timestamp_seconds\{worker="notify"\} (\S+)',
                         metrics, re.M)
        assert last and time.time() - float(last.group(1)) > 3.0, metrics
        assert 'sentinel_worker_interval_seconds{worker="notify"} 1.0' in metrics
        sock.settimeout(0.1)
        while True:  # drop pings sent before it turned unhealthy
            try:
                sock.recv(64)
            except TimeoutError:
                break
        assert _watchdog_pings(sock, 1.5) == 0, "the watchdog is fed while a worker is stuck"

        loopback.status = 200
        blocker.gate.set()
        wait_for(lambda: httpx.get(healthz).status_code == 200, 30, "/healthz to recover")
        assert loopback.accepted(), "the blocked message was delivered once let go"
        _wait_pings(sock, 2)  # the watchdog is fed again
    finally:
        app.stop(2)
        sock.close()
