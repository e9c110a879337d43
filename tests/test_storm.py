"""Issue 49, at a scale the suite can afford: the whole fleet fails at one instant.

A few hundred loopback targets (one asyncio server, a path each) flip at once
into an alert; a real App on SQLite scrapes and evaluates them, with a webhook
receiver on loopback and a real NOTIFY_SOCKET datagram socket for the
watchdog. Checked while the storm is recorded and until it has resolved:

- every target's alert is recorded (firing in alert_states, an open incident of
  its own: the history per target still answers);
- ONE fleet incident opens, every target's incident joined to it, and the
  receiver gets ONE page saying how many (incidents/fleet.py);
- /healthz answers 200 every time it is asked (busy is not dead);
- the watchdog is pinged on time: no gap that systemd (WatchdogSec) would act on;
- then the fleet recovers: every alert and incident resolves, and the fleet's
  one page gets one resolve (no per-target messages at any point).

bench/storm.py measures the same at 1,000 and 5,000 targets.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import wait_for
from notify_helpers import LoopbackReceiver
from sqlalchemy import func, select

from sentinel.incidents.models import AlertStateRow, Incident
from sentinel.incidents.models_fleet import FleetMember

pytestmark = [pytest.mark.integration, pytest.mark.heavy]

TARGETS = 300
WATCHDOG_SEC = 10.0  # pings due every 5 s

RULES = """groups:
  - name: storm
    rules:
      - alert: StormQueued
        expr: sum by (target) (vllm:num_requests_waiting) > 0
        for: 4s
        labels: {severity: warning}
"""


class Fleet:
    """TARGETS vLLM-shaped pages behind one loopback port (`/t<i>/metrics`), kept alive;
    `firing` flips every page at once."""

    def __init__(self) -> None:
        self.firing = False
        self.seen: set[bytes] = set()  # the paths scraped at least once
        self.loop = asyncio.new_event_loop()
        self.port = 0
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        assert ready.wait(30)

    def page(self) -> bytes:
        body = (b'vllm:num_requests_waiting{model_name="gemma"} '
                + (b"3" if self.firing else b"0") + b"\n")
        return (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        fleet = self

        class Target(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport
                self.buf = b""

            def data_received(self, data: bytes) -> None:
                self.buf += data
                while b"\r\n\r\n" in self.buf:
                    head, _, self.buf = self.buf.partition(b"\r\n\r\n")
                    fleet.seen.add(head.split(b" ", 2)[1])
                    self.transport.write(fleet.page())  # type: ignore[attr-defined]

        server = self.loop.run_until_complete(
            self.loop.create_server(Target, "127.0.0.1", 0, backlog=512))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    f = Fleet()
    yield f
    f.stop()


class Pings:
    """systemd's side of the watchdog: WATCHDOG=1 datagrams, timed as they arrive."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.2)
        self.times: list[float] = []
        self.running = True
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while self.running:
            try:
                if self.sock.recv(64) == b"WATCHDOG=1":
                    self.times.append(time.monotonic())
            except TimeoutError:
                continue
            except OSError:
                return

    def longest_gap(self, t0: float, t1: float) -> float:
        times = [t0] + [t for t in self.times if t0 <= t <= t1] + [t1]
        return max(b - a for a, b in zip(times, times[1:], strict=False))

    def stop(self) -> None:
        self.running = False
        self.sock.close()


def _config(folder: Path, fleet: Fleet, hook: str) -> Path:
    (folder / "rules.yaml").write_text(RULES)
    lines = [f"database: sqlite:///{folder / 'sentinel.db'}", "listen: 127.0.0.1:0",
             "rule_files: [rules.yaml]", "evaluation_interval: 2s",
             "scrape_interval: 2s", "scrape_timeout: 1500ms", "probe_interval: 0s",
             "collect_workers: 1",
             "receivers:", f"  - {{name: oncall, webhook: {{url: '{hook}', timeout: 2s}}}}",
             "targets:"]
    lines += [f"  - {{name: t{i}, url: 'http://127.0.0.1:{fleet.port}/t{i}'}}"
              for i in range(TARGETS)]
    path = folder / "sentinel.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _recorded(app) -> tuple[int, int]:  # noqa: ANN001
    """(StormQueued alerts firing in alert_states, open per-target StormQueued incidents)."""
    with app.pipeline.tracker.db.session() as s:
        firing = s.scalar(select(func.count()).select_from(AlertStateRow).where(
            AlertStateRow.rule == "StormQueued", AlertStateRow.state == "firing"))
        open_ = s.scalar(select(func.count()).select_from(Incident).where(
            Incident.alertname == "StormQueued", Incident.status == "open",
            Incident.target != ""))
    return int(firing or 0), int(open_ or 0)


def _fleet(app) -> list[tuple[str, int]]:  # noqa: ANN001
    """(status, members) of every StormQueued fleet incident."""
    with app.pipeline.tracker.db.session() as s:
        rows = s.execute(select(Incident.status, func.count(FleetMember.target))
                         .join(FleetMember, FleetMember.fleet_incident_id == Incident.id)
                         .where(Incident.group_key.startswith("fleet/StormQueued/"))
                         .group_by(Incident.id, Incident.status).order_by(Incident.id)).all()
    return [(str(status), int(n)) for status, n in rows]


def _messages(loopback: LoopbackReceiver) -> list[tuple[str, int, str]]:
    """(status, alerts, first summary) of every message the receiver accepted."""
    out = []
    for r in loopback.accepted():
        doc = r.json()
        assert isinstance(doc, dict)
        alerts = doc.get("alerts", [])
        summary = alerts[0].get("annotations", {}).get("summary", "") if alerts else ""
        out.append((str(doc.get("status")), len(alerts), summary))
    return out


def test_a_fleet_wide_failure_is_recorded_while_sentinel_stays_healthy(
        tmp_path: Path, fleet: Fleet, loopback: LoopbackReceiver,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sentinel.config import load_config
    from sentinel.daemon.app import App

    sock_path = str(tmp_path / "notify.sock")
    pings = Pings(sock_path)
    monkeypatch.setenv("NOTIFY_SOCKET", sock_path)
    monkeypatch.setenv("WATCHDOG_USEC", str(int(WATCHDOG_SEC * 1e6)))
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    app = App(load_config(_config(tmp_path, fleet, loopback.url())))
    app.start()
    healthz: list[int] = []
    try:
        assert app.status is not None
        host, port = app.status.address
        url = f"http://{host}:{port}/healthz"

        def asked() -> int:
            try:
                healthz.append(httpx.get(url, timeout=10).status_code)
            except httpx.HTTPError:
                healthz.append(0)  # no answer: as bad as a 503
            return healthz[-1]

        # Calm first: every target scraped (an evaluation saw them all, nothing fires).
        wait_for(lambda: len(fleet.seen) == TARGETS, 120, "every target scraped once")
        assert _recorded(app) == (0, 0)
        t0 = time.monotonic()
        fleet.firing = True  # the whole fleet, at one instant
        healthz.clear()
        wait_for(lambda: asked() is not None and _recorded(app) == (TARGETS, TARGETS), 300,
                 f"all {TARGETS} targets' alerts firing and recorded")
        t1 = time.monotonic()
        assert healthz and set(healthz) == {200}, f"/healthz during the storm: {healthz}"
        gap = pings.longest_gap(t0, t1)
        assert gap < WATCHDOG_SEC, f"no watchdog ping for {gap:.1f}s: systemd would restart"
        wait_for(lambda: loopback.accepted(), 120, "the page to go out")
        # One fleet incident with every target as a member; one page, saying how many.
        wait_for(lambda: _fleet(app) == [("open", TARGETS)], 120,
                 f"one fleet incident with {TARGETS} members")
        pages = [m for m in _messages(loopback) if m[0] == "firing"]
        assert len(pages) == 1, pages
        # What and how many when the threshold was crossed (the rest joined after it: the
        # count goes as an update once the route's group_interval allows).
        assert re.match(rf"StormQueued on [0-9,]+ of {TARGETS:,} targets", pages[0][2]), pages

        fleet.firing = False  # the fleet recovers
        healthz.clear()
        wait_for(lambda: asked() is not None and _recorded(app) == (0, 0), 300,
                 "every alert and incident resolved")
        t2 = time.monotonic()
        assert set(healthz) == {200}, f"/healthz during the recovery: {healthz}"
        assert pings.longest_gap(t1, t2) < WATCHDOG_SEC
        # The fleet incident resolved when its last target recovered: one resolve.
        assert _fleet(app) == [("resolved", TARGETS)]
        wait_for(lambda: any(m[0] == "resolved" for m in _messages(loopback)), 120,
                 "the fleet's resolve")
        kinds = [m[0] for m in _messages(loopback)]
        assert kinds.count("firing") == 1 and kinds.count("resolved") == 1, kinds
    finally:
        app.stop(5)
        pings.stop()
