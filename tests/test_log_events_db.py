"""Log events and log-source cursors in the database, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sentinel.collect.logcursor import LogCursor
from sentinel.collect.logfile import FilePosition
from sentinel.incidents.db import Database
from sentinel.incidents.log_events import (
    DbCursorStore,
    DbPositionStore,
    load_cursor,
    recent_log_events,
    record_log_events,
    save_cursor,
)
from sentinel.model import LogEvent

T0 = 1_795_000_000_000


def _event(target: str, t_ms: int, signature: str = "tpu_hbm_oom") -> LogEvent:
    return LogEvent(
        target=target, source="cloud-logging", signature=signature, category="hbm_oom",
        severity="critical", t_ms=t_ms, line_no=None,
        excerpt=("Traceback (most recent call last):", "RESOURCE_EXHAUSTED: ünïcode ✓"),
        runbook="Lower --max-num-seqs.",
    )


def test_events_round_trip_newest_kept_oldest_first(incident_db: Database) -> None:
    events = [_event("a", T0 + i * 1000) for i in range(5)] + [_event("b", T0 + 2500)]
    ids = record_log_events(incident_db, events, now_ms=T0 + 10_000)
    assert len(ids) == 6 and len(set(ids)) == 6
    got = recent_log_events(incident_db, "a", since_ms=T0 + 1000, limit=3)
    assert [e.t_ms for e in got] == [T0 + 2000, T0 + 3000, T0 + 4000]
    assert got[0] == events[2]  # every field survives, the excerpt as a tuple
    assert recent_log_events(incident_db, "b", since_ms=T0) == [events[5]]
    assert recent_log_events(incident_db, "c", since_ms=T0) == []


def test_cursor_round_trip_and_replace(incident_db: Database) -> None:
    assert load_cursor(incident_db, "cloud-logging:a") is None
    at = datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=UTC)
    save_cursor(incident_db, "cloud-logging:a", LogCursor(at, frozenset({"x", "y"})))
    assert load_cursor(incident_db, "cloud-logging:a") == LogCursor(at, frozenset({"x", "y"}))
    store = DbCursorStore(incident_db)
    later = LogCursor(datetime(2026, 11, 21, 10, 0, 1, tzinfo=UTC), frozenset())
    store.save("cloud-logging:a", later)
    assert store.load("cloud-logging:a") == later
    assert store.load("cloud-logging:b") is None


def test_events_and_cursor_commit_together(incident_db: Database) -> None:
    at = datetime(2026, 11, 21, 10, 0, 0, 1, tzinfo=UTC)
    record_log_events(incident_db, [_event("a", T0)],
                      cursors={"k": LogCursor(at, frozenset({"i1"}))})
    assert load_cursor(incident_db, "k") == LogCursor(at, frozenset({"i1"}))
    # A failing insert rolls the cursor back with it.
    bad = LogEvent(target="a", source="s", signature="x" , category="c" * 100, severity="s",
                   t_ms=T0, line_no=None, excerpt=())
    if incident_db.dialect == "sqlite":
        pytest.skip("SQLite does not enforce VARCHAR lengths")
    with pytest.raises(Exception):  # noqa: B017 - the driver's DataError
        record_log_events(incident_db, [bad], cursors={"k": LogCursor(at, frozenset())})
    assert load_cursor(incident_db, "k") == LogCursor(at, frozenset({"i1"}))


def test_file_positions_round_trip_with_64_bit_inodes(incident_db: Database) -> None:
    store = DbPositionStore(incident_db)
    assert store.load("file:a:/var/log/vllm.log") is None
    big = FilePosition(dev=2**64 - 3, inode=2**63 + 5, offset=10_000_000_000, line_no=None)
    store.save("file:a:/var/log/vllm.log", big)
    assert store.load("file:a:/var/log/vllm.log") == big
    small = FilePosition(dev=2049, inode=12, offset=7, line_no=3)
    record_log_events(incident_db, [_event("a", T0)], positions={"file:a:/var/log/vllm.log": small})
    assert store.load("file:a:/var/log/vllm.log") == small
    assert store.load("file:b:/var/log/vllm.log") is None
