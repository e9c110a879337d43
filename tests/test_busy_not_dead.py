"""Issue 49: liveness tells the truth, and Sentinel's threads never lock each other out of SQLite.

- A worker inside a run whose thread keeps making progress (database
  statements, rules evaluated, a wait for the SQLite writer) is busy, not
  stuck, up to BUSY_LIMIT_INTERVALS; a run without progress is stuck after 3
  intervals, as before (the notify worker blocked in a receiver:
  test_health_stuck.py).
- The systemd watchdog is fed from a thread of its own, while healthy.
- Every session on one SQLite file waits its turn on one lock in the process:
  "database is locked" cannot happen between Sentinel's own threads.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from fixtures_e2e import wait_for
from sqlalchemy import text

from sentinel import progress
from sentinel.daemon.heartbeat import BUSY_LIMIT_MIN_S, Heartbeats
from sentinel.daemon.systemd import WatchdogPinger
from sentinel.incidents import db as dbmod
from sentinel.incidents.db import Database, DatabaseError

# -- busy or stuck: pure, time passed in ------------------------------------------------


def test_a_run_that_makes_progress_is_busy_and_one_that_does_not_is_stuck() -> None:
    hb = Heartbeats()
    hb.expect("rules:g", 1.0, since_s=0.0)
    with hb.working("rules:g", now_s=0.0):
        progress.mark(10.0)  # a statement, a rule: this thread is still at work
        assert hb.stuck(11.0) == []  # silent 11 intervals, but busy
        assert [s.worker for s in hb.stuck(13.5)] == ["rules:g"]  # no progress for 3.5
        progress.mark(300.0)
        assert hb.stuck(301.0) == []  # 300 intervals, still making progress: busy
        progress.mark(BUSY_LIMIT_MIN_S + 0.5)
        # Progress, but running longer than the limit: a livelock is not busy forever.
        assert [s.worker for s in hb.stuck(BUSY_LIMIT_MIN_S + 1.0)] == ["rules:g"]
    # The run ended (at the time passed in): no longer inside a run, it is its last run.
    [beat] = hb.beats(BUSY_LIMIT_MIN_S + 1.0)
    assert beat.running_since is None and beat.last_s == 0.0


def test_a_worker_not_inside_a_run_is_stuck_whatever_its_thread_did() -> None:
    hb = Heartbeats()
    hb.expect("housekeeping", 1.0, since_s=0.0)
    progress.mark(9.0)
    assert [s.worker for s in hb.stuck(10.0)] == ["housekeeping"]


def test_waiting_for_the_sqlite_writer_is_busy(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'w.db'}")
    db.upgrade()
    hb = Heartbeats()
    hb.expect("rules:b", 0.05, since_s=time.monotonic())
    holding, release, waited = threading.Event(), threading.Event(), threading.Event()

    def holder() -> None:
        with db.session() as s:
            s.execute(text("SELECT 1"))
            holding.set()
            release.wait(30)

    def waiter() -> None:
        with hb.working("rules:b"), db.session() as s:
            s.execute(text("SELECT 1"))
        waited.set()

    a = threading.Thread(target=holder)
    a.start()
    assert holding.wait(30)
    b = threading.Thread(target=waiter)
    b.start()
    try:
        time.sleep(0.5)  # ten of its intervals behind the writer
        assert not waited.is_set()
        assert hb.stuck(time.monotonic()) == []  # busy behind the writer, not wedged
    finally:
        release.set()
        a.join(30)
        b.join(30)
        db.dispose()
    assert waited.is_set()


# -- the watchdog's own thread --------------------------------------------------------


def test_the_watchdog_is_fed_from_its_own_thread_while_healthy() -> None:
    sent: list[tuple[str, str]] = []
    why: list[str | None] = [None]
    unhealthy_checks = [0]

    def healthy() -> str | None:
        if why[0] is not None:
            unhealthy_checks[0] += 1
        return why[0]

    pinger = WatchdogPinger(0.02, healthy,
                            lambda s: sent.append((s, threading.current_thread().name)) or True)
    pinger.start()
    try:
        wait_for(lambda: len(sent) >= 3, 30, "three pings")
        assert {name for _, name in sent} == {"sentinel-watchdog"}
        assert {s for s, _ in sent} == {"WATCHDOG=1"}
        why[0] = "rules:g: has not completed a run"
        # The pinger checks, then sends, in one thread: once a check has said unhealthy,
        # a ping decided before it has landed, so the count is final from here.
        wait_for(lambda: unhealthy_checks[0] >= 1, 30, "an unhealthy check")
        n = len(sent)
        wait_for(lambda: unhealthy_checks[0] >= 6, 30, "five more unhealthy checks")
        assert len(sent) == n  # unhealthy: not fed
    finally:
        pinger.stop()


# -- one writer per SQLite file --------------------------------------------------------


def _hammer(db: Database, threads: int = 4, rounds: int = 3) -> list[str]:
    """Threads that each hold write transactions for longer than the busy timeout."""
    errors: list[str] = []
    start = threading.Barrier(threads)

    def work(i: int) -> None:
        start.wait()
        for r in range(rounds):
            try:
                with db.session() as s:
                    s.execute(text("INSERT INTO t (v) VALUES (:v)"), {"v": i * 100 + r})
                    time.sleep(0.15)  # a storm's long transaction
            except DatabaseError as e:
                errors.append(str(e))

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    return errors


@pytest.mark.parametrize("one_writer", [True, False])
def test_sentinels_threads_never_see_database_is_locked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_writer: bool) -> None:
    # A busy timeout far shorter than the transactions: without the one writer, the
    # threads give up on each other (the control case shows the test can fail).
    monkeypatch.setattr(dbmod, "SQLITE_BUSY_TIMEOUT_MS", 20)
    db = Database(f"sqlite:///{tmp_path / 'locked.db'}")
    try:
        with db.session() as s:
            s.execute(text("CREATE TABLE t (v INTEGER)"))
        if not one_writer:
            db._writer = None  # noqa: SLF001 (the control: SQLite's own lock only)
        errors = _hammer(db)
        with db.engine.connect() as conn:
            rows = conn.execute(text("SELECT count(*) FROM t")).scalar()
    finally:
        db.dispose()
    if one_writer:
        assert errors == [] and rows == 12
    else:
        assert any("database is locked" in e for e in errors), errors


def test_two_handles_on_one_file_share_the_writer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'same.db'}"
    a, b = Database(url), Database(url)
    other = Database(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        assert a._writer is b._writer is not None  # noqa: SLF001
        assert other._writer is not a._writer  # noqa: SLF001
    finally:
        for d in (a, b, other):
            d.dispose()
