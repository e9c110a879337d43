"""Docker logs through the Engine API (issue 35): resumed from the saved cursor, exactly once.

The simulator's Docker socket serves `GET /containers/{name}/logs` as Docker
does (multiplexed frames, RFC 3339 nanosecond timestamps, `since`, `follow`).
The cursor is saved in the database (`log_cursors`) as LogWatch saves it;
a new source (a restarted Sentinel) asks from there.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fixtures_e2e import wait_for

from sentinel.collect.dockerapi_logs import DockerApiLogSource
from sentinel.incidents.db import Database
from sentinel.incidents.log_events import DbCursorStore
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import start_sim

CRASH = ["Traceback (most recent call last):",
         "RuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: HBM OOM",
         "RuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: HBM OOM",
         "ERROR EngineCore died"]


@pytest.fixture
def container() -> Iterator[tuple[object, str]]:
    sim = start_sim()
    folder = Path(tempfile.mkdtemp(prefix="dl-", dir="/tmp"))  # unix socket paths are short
    path = str(folder / "docker.sock")
    sock = serve_container(sim, ContainerSpec(name="vllm"), path)
    yield sim.container, path
    sock.stop()
    sim.stop()
    shutil.rmtree(folder, ignore_errors=True)


class _Reader:
    """A source and everything its polls returned, its cursor saved after each poll."""

    def __init__(self, path: str, store: DbCursorStore, **kw: object) -> None:
        self.source = DockerApiLogSource("tpu-a", "vllm", path, cursor_store=store, **kw)
        self.store = store
        self.texts: list[str] = []

    def poll(self) -> list[str]:
        got = [e.text for e in self.source.poll(int(time.time() * 1000))]
        self.texts += got
        if got:  # LogWatch: the cursor goes with the events, in one transaction
            assert self.source.cursor is not None
            self.store.save(self.source.cursor_key, self.source.cursor)
        return self.texts

    def until(self, line: str) -> list[str]:
        wait_for(lambda: line in self.poll(), 15, f"{line!r} through the Engine API")
        return self.texts


def test_a_restarted_reader_gets_what_was_written_while_down_exactly_once(
        container, tmp_path: Path) -> None:  # noqa: ANN001
    sim_container, path = container
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    db.upgrade()
    store = DbCursorStore(db)
    sim_container.print(["written before Sentinel ever ran"])
    first = _Reader(path, store)
    first.poll()  # starts following from now
    wait_for(lambda: first.source.health.ok and first.source._thread is not None, 5, "start")
    sim_container.print(["serving 1"])
    assert first.until("serving 1") == ["serving 1"]
    first.source.close()  # Sentinel stops
    sim_container.print(CRASH)  # the container crashes while nobody reads
    second = _Reader(path, store)  # Sentinel starts again, from the saved cursor
    texts = second.until("ERROR EngineCore died")
    assert texts == CRASH  # once each (the two equal lines both, in order), nothing older
    # Idle follow requests end and are asked again from the newest line: no repeats.
    second.source.close()
    third = _Reader(path, store, idle_timeout_s=0.2)
    third.poll()
    wait_for(lambda: third.source.reconnects >= 3, 10, "a few idle reconnects")
    sim_container.print(["serving 2"])
    assert third.until("serving 2") == ["serving 2"]
    third.source.close()
    db.dispose()


def test_a_missing_container_or_socket_is_health_not_an_exception(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    db.upgrade()
    source = DockerApiLogSource("tpu-a", "vllm", str(tmp_path / "nothing.sock"),
                                cursor_store=DbCursorStore(db))
    assert source.poll(0) == []
    wait_for(lambda: source.poll(0) == [] and not source.health.ok, 10, "the error in health")
    assert "docker logs of vllm" in (source.health.last_error or "")
    source.close()
    db.dispose()


def _daemon_config(folder: Path, sim_url: str, socket_path: str) -> Path:
    (folder / "rules.yaml").write_text("groups: []\n")
    cfg = folder / "sentinel.yaml"
    cfg.write_text(f"""\
database: sqlite:///{folder / 'sentinel.db'}
listen: 127.0.0.1:0
rule_files: [rules.yaml]
targets:
  - name: tpu-a
    url: {sim_url}
    scrape_interval: 1s
    logs:
      docker: [vllm]
      docker_socket: {socket_path}
      poll_interval: 200ms
""")
    return cfg


def _events(db: Database) -> list[tuple[str, str]]:
    from sqlalchemy import select

    from sentinel.incidents.models import LogEventRow

    with db.session() as s:
        return [(r.signature, r.source) for r in s.scalars(select(LogEventRow)
                                                           .order_by(LogEventRow.id))]


def _cursor_saved(db: Database) -> object:
    from sentinel.incidents.log_events import load_cursor

    return load_cursor(db, "docker:tpu-a:vllm")


@pytest.mark.integration
@pytest.mark.parametrize("down_s", [0, pytest.param(30, marks=pytest.mark.slow)])
def test_daemon_stopped_while_the_container_crashes_matches_the_crash_once(
        tmp_path: Path, down_s: int) -> None:
    """Sentinel reads the container's logs, stops; the container logs an HBM OOM crash
    while it is down (for `down_s`); the restarted Sentinel matches that crash once."""
    from sentinel.config import load_config
    from sentinel.daemon.app import App

    sim = start_sim()
    folder = Path(tempfile.mkdtemp(prefix="dl-", dir="/tmp"))
    sock = serve_container(sim, ContainerSpec(name="vllm"), str(folder / "docker.sock"))
    cfg = _daemon_config(tmp_path, sim.url, str(folder / "docker.sock"))
    db = Database(f"sqlite:///{tmp_path / 'sentinel.db'}")
    app = App(load_config(cfg))
    try:
        app.start()
        sim.container.print(["INFO: serving on :8000"])
        wait_for(lambda: _cursor_saved(db), 20, "Sentinel to read the container's output")
        assert _events(db) == []
        app.stop(5)
        app = None
        sim.container.crash("down")  # the HBM OOM traceback, written while nobody reads
        stopped_until = time.monotonic() + down_s
        while time.monotonic() < stopped_until:  # the downtime itself, not a wait for an event
            time.sleep(0.5)
        app = App(load_config(cfg))
        app.start()
        wait_for(lambda: _events(db), 20, "the crash to be matched after the restart")
        sim.container.print(["INFO: a later line"])
        cursor = _cursor_saved(db)
        wait_for(lambda: _cursor_saved(db) != cursor, 20, "Sentinel to read past the crash")
        events = _events(db)
        signatures = [sig for sig, _ in events]
        assert len(signatures) == len(set(signatures)) >= 1, events  # each matched once
        assert all(src == "docker:vllm" for _, src in events)
        assert any("oom" in sig.lower() or "hbm" in sig.lower() for sig in signatures), events
    finally:
        if app is not None:
            app.stop(5)
        sock.stop()
        sim.stop()
        db.dispose()
        shutil.rmtree(folder, ignore_errors=True)


def test_lines_written_before_the_first_request_but_after_watching_began_are_read(
        container, tmp_path: Path) -> None:  # noqa: ANN001
    """Issue 53: the daemon builds the source (and says ready) before the reader thread
    sends its first request; a crash written in between is at or after `since_ms`."""
    sim_container, path = container
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    db.upgrade()
    sim_container.print(["written before Sentinel began watching"])
    began_ms = int(time.time() * 1000) + 1  # after that line's timestamp
    while int(time.time() * 1000) <= began_ms:
        time.sleep(0.002)  # the next lines are stamped after began_ms
    reader = _Reader(path, DbCursorStore(db), since_ms=began_ms)
    sim_container.print(CRASH)  # "ready" said; no request sent yet (no poll yet)
    assert not sim_container.times("GET logs")
    assert reader.until("ERROR EngineCore died") == CRASH
    reader.source.close()
    db.dispose()


@pytest.mark.integration
def test_a_crash_written_the_moment_the_daemon_is_ready_is_caught(tmp_path: Path) -> None:
    """Issue 53: "ready" comes before the log follower's first request; the container
    crashes right after it (the test does not wait for that request) and the crash is
    matched, from lines the follower asked for since the daemon began watching."""
    from sentinel.config import load_config
    from sentinel.daemon.app import App

    sim = start_sim()
    folder = Path(tempfile.mkdtemp(prefix="dl-", dir="/tmp"))
    sock = serve_container(sim, ContainerSpec(name="vllm"), str(folder / "docker.sock"))
    cfg = _daemon_config(tmp_path, sim.url, str(folder / "docker.sock"))
    db = Database(f"sqlite:///{tmp_path / 'sentinel.db'}")
    app = App(load_config(cfg))
    try:
        app.start()
        assert app.ready() is None
        sim.container.crash("down")
        wait_for(lambda: _events(db), 60, "the crash written right after ready")
        assert any("oom" in sig.lower() or "hbm" in sig.lower() for sig, _ in _events(db))
    finally:
        app.stop(5)
        sock.stop()
        sim.stop()
        db.dispose()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.integration
def test_the_daemons_sources_read_from_when_they_were_built_not_first_polled(
        tmp_path: Path) -> None:
    """Issue 53, deterministically: the daemon builds its sources (SourceJobs) before it
    says ready; the container and a log file crash before any poll is scheduled, and
    both crashes are matched once the polls start."""
    from apscheduler.schedulers.background import BackgroundScheduler

    from sentinel.config import load_config
    from sentinel.daemon.selfmetrics import SelfMetrics
    from sentinel.daemon.sourcejobs import SourceJobs
    from sentinel.store import MemoryStore

    sim = start_sim()
    folder = Path(tempfile.mkdtemp(prefix="dl-", dir="/tmp"))
    sock = serve_container(sim, ContainerSpec(name="vllm"), str(folder / "docker.sock"))
    logfile = tmp_path / "vllm.log"
    logfile.write_text("INFO: an old line\n")
    cfg = _daemon_config(tmp_path, sim.url, str(folder / "docker.sock"))
    cfg.write_text(cfg.read_text() + f"      files: [{logfile}]\n")
    db = Database(f"sqlite:///{tmp_path / 'sentinel.db'}")
    db.upgrade()
    jobs = SourceJobs(load_config(cfg), MemoryStore(retention_ms=60_000), db, SelfMetrics(),
                      lambda: int(time.time() * 1000))
    sched = BackgroundScheduler()
    try:
        sim.container.crash("down")  # "ready" said, no poll yet: no request, no read
        with logfile.open("a") as f:
            f.write("\n".join(CRASH) + "\n")
        assert not sim.container.times("GET logs")
        jobs.schedule(sched, lambda _name, job: job, datetime.now(UTC))
        sched.start()
        wait_for(lambda: {src for _, src in _events(db)} >= {"docker:vllm", f"file:{logfile}"},
                 60, "both crashes matched")
    finally:
        sched.shutdown(wait=True)
        jobs.close()
        sock.stop()
        sim.stop()
        db.dispose()
        shutil.rmtree(folder, ignore_errors=True)
