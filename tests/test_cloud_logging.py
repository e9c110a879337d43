"""The Cloud Logging source: the real google-cloud-logging client against the local fake."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fakes.cloud_logging_server import FakeCloudLogging, rfc3339_ns, running_fake
from fakes.offline import connections, is_loopback, offline_google_env
from google.auth.credentials import AnonymousCredentials

from sentinel.collect.cloud_logging import (
    DEFAULT_FILTER,
    CloudLoggingOptions,
    CloudLoggingSource,
    default_filter,
    make_client,
)
from sentinel.collect.logcursor import CursorStore, LogCursor, MemoryCursorStore
from sentinel.incidents.db import Database
from sentinel.incidents.log_events import DbCursorStore, load_cursor, record_log_events
from sentinel.model import LogEntry, LogEvent

NOW_MS = 1_795_000_000_000
PROJECT = "test-project"


def ns(ms_before_now: int, extra_ns: int = 0) -> int:
    """An entry timestamp `ms_before_now` before NOW_MS, in nanoseconds."""
    return (NOW_MS - ms_before_now) * 1_000_000 + extra_ns


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCloudLogging]:
    """The fake, with google's libraries kept off every non-loopback host."""
    offline_google_env(monkeypatch)
    with connections() as hosts, running_fake(PROJECT) as server:
        yield server
    assert hosts, "the audit hook saw no connection at all"
    assert [h for h in hosts if not is_loopback(h)] == []


def source(fake: FakeCloudLogging, store: CursorStore, **options: int) -> CloudLoggingSource:
    return CloudLoggingSource(
        "tpu-a", PROJECT, cursor_store=store,
        client_factory=lambda: make_client(PROJECT, api_endpoint=fake.endpoint,
                                           credentials=AnonymousCredentials()),
        options=CloudLoggingOptions(**options), rng=random.Random(7),
    )


def ids(entries: list[LogEntry]) -> list[str | None]:
    return [e.insert_id for e in entries]


def test_pages_through_next_page_token_in_timestamp_order(fake: FakeCloudLogging) -> None:
    added = [fake.add(ns(60_000 - i * 10), f"line {i}") for i in range(7)]
    src = source(fake, MemoryCursorStore(), page_size=3)
    got = src.poll(NOW_MS)
    assert ids(got) == added
    assert [e.text for e in got] == [f"line {i}" for i in range(7)]
    assert got[0] == LogEntry("tpu-a", f"cloud-logging:{PROJECT}", NOW_MS - 60_000, "line 0",
                              insert_id=added[0])
    bodies = [r.body for r in fake.requests]
    assert len(bodies) == 3  # 3 + 3 + 1, following nextPageToken
    assert "pageToken" not in bodies[0] and bodies[1]["pageToken"] and bodies[2]["pageToken"]
    assert all(b["pageSize"] == 3 and b["orderBy"] == "timestamp asc"
               and b["resourceNames"] == [f"projects/{PROJECT}"] for b in bodies)
    assert bodies[0]["filter"].startswith(f"({DEFAULT_FILTER}) AND timestamp>=")
    assert src.health.ok and src.health.last_success_ms == NOW_MS
    assert src.poll(NOW_MS + 15_000) == []  # nothing new, nothing repeated


def test_default_filter_selects_stderr_and_warnings_of_tpu_workers(fake: FakeCloudLogging) -> None:
    keep = [fake.add(ns(50_000), "stderr, no severity", severity=None),
            fake.add(ns(49_000), "agent warning", log="syslog", severity="WARNING"),
            fake.add(ns(48_000), "other node", node_id="node-2", severity=None)]
    fake.add(ns(47_000), "chatty info", log="syslog", severity="INFO")
    fake.add(ns(46_000), "a VM's stderr", resource_type="gce_instance")
    assert ids(source(fake, MemoryCursorStore()).poll(NOW_MS)) == keep
    narrowed = CloudLoggingSource(
        "tpu-b", PROJECT, cursor_store=MemoryCursorStore(), filter=default_filter("node-2"),
        client_factory=lambda: make_client(PROJECT, api_endpoint=fake.endpoint,
                                           credentials=AnonymousCredentials()))
    assert ids(narrowed.poll(NOW_MS)) == keep[2:]


def test_first_poll_looks_back_and_reading_stops_short_of_now(fake: FakeCloudLogging) -> None:
    fake.add(ns(11 * 60_000), "before the initial lookback")
    old = fake.add(ns(9 * 60_000), "inside the lookback")
    fresh = fake.add(ns(2_000), "not settled yet")
    src = source(fake, MemoryCursorStore())
    assert ids(src.poll(NOW_MS)) == [old]
    assert ids(src.poll(NOW_MS + 10_000)) == [fresh]


def test_multiline_payload_becomes_one_entry_per_line(fake: FakeCloudLogging) -> None:
    iid = fake.add(ns(30_000), "Traceback (most recent call last):\n  File \"x.py\"\n"
                   "RuntimeError: RESOURCE_EXHAUSTED")
    got = source(fake, MemoryCursorStore()).poll(NOW_MS)
    assert [e.text for e in got] == ["Traceback (most recent call last):", '  File "x.py"',
                                     "RuntimeError: RESOURCE_EXHAUSTED"]
    assert {e.insert_id for e in got} == {iid} and {e.t_ms for e in got} == {NOW_MS - 30_000}


def test_restart_misses_nothing_and_repeats_nothing(fake: FakeCloudLogging,
                                                    incident_db: Database) -> None:
    # Five entries share one timestamp (nanoseconds included), and both a
    # page (size 2) and a poll (at most 3 entries) end in the middle of them.
    before = fake.add(ns(40_000), "before")
    same = [fake.add(ns(30_000, 123_456_789), f"same {i}") for i in range(5)]
    first = source(fake, DbCursorStore(incident_db), page_size=2, max_entries_per_poll=3)
    got = ids(first.poll(NOW_MS))
    assert got == [before, *same[:2]]
    saved = load_cursor(incident_db, "cloud-logging:tpu-a")
    assert saved == LogCursor(datetime.fromtimestamp((NOW_MS - 30_000) / 1000, UTC).replace(
        microsecond=123_456), frozenset(same[:2]))
    first.close()

    # A new daemon: new source, new client, same database.
    second = source(fake, DbCursorStore(incident_db), page_size=2, max_entries_per_poll=3)
    got += ids(second.poll(NOW_MS + 1_000))
    # One more entry with the very timestamp the cursor stands on, and a later one.
    late = fake.add(ns(30_000, 123_456_789), "same timestamp, visible later")
    after = fake.add(ns(20_000), "after")
    third = source(fake, DbCursorStore(incident_db), page_size=2)
    got += ids(third.poll(NOW_MS + 3_000))
    assert got == [before, *same, late, after]
    assert third.poll(NOW_MS + 4_000) == []


def test_429_backs_off_with_jitter_without_hot_looping(fake: FakeCloudLogging) -> None:
    iid = fake.add(ns(30_000), "HBM OOM")
    fake.fail_next(3, 429)
    src = source(fake, MemoryCursorStore(), backoff_base_ms=2_000)
    polls: list[tuple[int, list[LogEntry]]] = []
    t = NOW_MS
    while not any(got for _, got in polls) and t < NOW_MS + 120_000:
        polls.append((t, src.poll(t)))
        if not src.health.ok:
            assert "429" in (src.health.last_error or "")
        t += 100  # a scheduler gone wrong: polling every 100 ms
    statuses = [r.status for r in fake.requests]
    assert statuses == [429, 429, 429, 200]  # ~1000 polls, four requests
    first_success = polls[-1][0]
    assert first_success - NOW_MS >= 1_000 + 2_000 + 4_000  # at least half of 2 + 4 + 8 s
    assert first_success - NOW_MS <= 2_000 + 4_000 + 8_000 + 100
    assert ids(polls[-1][1]) == [iid] and src.health.ok


def test_retry_after_and_5xx(fake: FakeCloudLogging) -> None:
    fake.fail_next(1, 429, retry_after="30")
    fake.fail_next(1, 503)
    src = source(fake, MemoryCursorStore())
    assert src.poll(NOW_MS) == []
    assert src.poll(NOW_MS + 29_000) == [] and len(fake.requests) == 1
    assert src.poll(NOW_MS + 30_000) == [] and len(fake.requests) == 2
    assert src.health.last_error is not None and src.health.last_error.startswith("503")
    iid = fake.add(ns(5_000), "after the outage")
    assert ids(src.poll(NOW_MS + 60_000)) == [iid] and src.health.ok


def test_bad_filter_is_permanent_and_waits_the_longest(fake: FakeCloudLogging) -> None:
    src = CloudLoggingSource(
        "tpu-a", PROJECT, cursor_store=MemoryCursorStore(), filter='SEARCH("oom")',
        client_factory=lambda: make_client(PROJECT, api_endpoint=fake.endpoint,
                                           credentials=AnonymousCredentials()),
        options=CloudLoggingOptions(backoff_max_ms=300_000))
    assert src.poll(NOW_MS) == []
    assert src.health.last_error is not None and src.health.last_error.startswith("400")
    assert src.poll(NOW_MS + 299_000) == [] and len(fake.requests) == 1
    src.poll(NOW_MS + 300_000)
    assert len(fake.requests) == 2


def test_malformed_entries_are_bounded_and_counted(fake: FakeCloudLogging,
                                                   incident_db: Database) -> None:
    fake.add(ns(50_000), json_payload=["not", "an", "object"])
    fake.add(ns(49_000), "binary \x00\x01 junk \udc80 end")
    fake.add(ns(48_000), "A" * (10 * 1024 * 1024))
    fake.add(ns(47_000), json_payload={"MESSAGE": "journald says hi", "PRIORITY": "3"})
    fake.add(ns(46_000), json_payload={"level": "error", "code": 137})
    src = source(fake, MemoryCursorStore(), max_text_chars=65_536)
    got = src.poll(NOW_MS)
    texts = [e.text for e in got]
    assert texts[0] == '["not","an","object"]'
    assert texts[1] == "binary \ufffd\ufffd junk \ufffd end"
    assert texts[2].startswith("A" * 65_536) and texts[2].endswith("[truncated 10420224 chars]")
    assert texts[3:5] == ["journald says hi", '{"level":"error","code":137}']
    assert src.health.ok
    assert src.malformed == {"payload_not_object": 1, "binary_replaced": 1,
                             "payload_truncated": 1}
    # What comes out is fit for the database as an excerpt.
    record_log_events(incident_db, [LogEvent("tpu-a", e.source, "sig", "other", "warning",
                                             e.t_ms, None, (e.text,)) for e in got[:3]])


def test_entry_without_timestamp_is_filed_at_the_cursor() -> None:
    # The API always sends a timestamp (and the fake's time filter drops
    # entries without one), so this path is fed by a stub client.
    # Imported here: the client library costs every test worker ~0.5 CPU-s to collect.
    from google.cloud.logging_v2.entries import TextEntry

    class StubClient:
        def list_entries(self, **_kw: object) -> list[TextEntry]:
            return [TextEntry(payload="no time", insert_id="a", log_name="l", timestamp=None)]

        def close(self) -> None:
            pass

    src = CloudLoggingSource("tpu-a", PROJECT, cursor_store=MemoryCursorStore(),
                             client_factory=StubClient)
    got = src.poll(NOW_MS)
    assert [(e.text, e.t_ms) for e in got] == [("no time", NOW_MS - 600_000)]
    assert src.malformed == {"no_timestamp": 1}
    assert src.poll(NOW_MS + 1) == []  # read at the cursor's timestamp: not again
    src.close()


def test_invalid_json_body_and_unparseable_entry_never_crash(fake: FakeCloudLogging) -> None:
    first = fake.add(ns(50_000), "good")
    fake.add_raw({"logName": f"projects/{PROJECT}/logs/stderr", "insertId": "bad-ts",
                  "timestamp": rfc3339_ns(ns(40_000)).replace("Z", "+00:00"),
                  "resource": {"type": "tpu_worker", "labels": {}}, "textPayload": "x"})
    fake.invalid_json_next(1)
    src = source(fake, MemoryCursorStore())
    assert src.poll(NOW_MS) == []
    assert src.health.last_error is not None and "malformed response" in src.health.last_error
    # The library itself cannot parse a timestamp without "Z" (the real API
    # always writes UTC with "Z"): entries before that one still come through.
    got = src.poll(NOW_MS + 10_000)
    assert ids(got) == [first] and not src.health.ok


def test_cursor_left_to_the_caller_without_auto_commit(fake: FakeCloudLogging,
                                                       incident_db: Database) -> None:
    iid = fake.add(ns(30_000), "x")
    store = DbCursorStore(incident_db)
    src = CloudLoggingSource(
        "tpu-a", PROJECT, cursor_store=store, auto_commit=False,
        client_factory=lambda: make_client(PROJECT, api_endpoint=fake.endpoint,
                                           credentials=AnonymousCredentials()))
    assert ids(src.poll(NOW_MS)) == [iid]
    saved = store.load(src.cursor_key)
    assert saved is not None and saved.insert_ids == frozenset()  # only the starting point
    assert src.cursor is not None
    record_log_events(incident_db, [], cursors={src.cursor_key: src.cursor})
    assert store.load(src.cursor_key) == src.cursor


def test_client_factory_failure_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    offline_google_env(monkeypatch)

    def no_credentials() -> object:
        from google.auth.exceptions import DefaultCredentialsError
        raise DefaultCredentialsError("Your default credentials were not found.")

    src = CloudLoggingSource("tpu-a", PROJECT, cursor_store=MemoryCursorStore(),
                             client_factory=no_credentials)
    assert src.poll(NOW_MS) == []
    assert src.health.last_error == "no credentials: Your default credentials were not found."
    assert src.poll(NOW_MS + 60_000) == []  # permanent: waits the longest delay
