"""A container's log lines through the Docker Engine API, resumed from a saved position.

`GET /containers/{id}/logs?follow=1&stdout=1&stderr=1&timestamps=1&since=T`
on the unix socket Sentinel already uses for restarts (no docker CLI in the
image). The body is Docker's multiplexed stream (8-byte frame headers) when
the container has no TTY, or the raw output when it has one; both are read.

Where it stopped is a `LogCursor`: the newest line's timestamp and the lines
already read at exactly that timestamp (their ordinal and a hash: Docker
sends every line at or after `since` again, and several lines can share a
nanosecond). `poll` returns the lines read since the last poll and moves
`cursor`; LogWatch saves the cursor under `cursor_key` in the same
transaction as the events it derived, so a restarted Sentinel asks for the
lines from there and matches a crash written while it was down exactly once.
Without a saved cursor the source starts at `since_ms`, the time Sentinel
began watching (the daemon passes its start, before it reports ready), else
at its first poll: the follow request is sent by a thread after the first
poll, so a line the container writes between "ready" and that request is
still at or after `since` and is read (issue 53).

A reader thread holds the follow request; when it ends (the container
restarted, the daemon went away, an idle read timed out) it asks again from
the newest line it read, after a backoff when it failed. Lines wait in a
bounded queue; the oldest are dropped (and counted) when polls fall behind.

The container's deaths come from the engine itself too: a second thread
follows `GET /events` for this container's `die` and `oom` events and puts
each in the stream as `docker events` prints it (`... container die <id>
(exitCode=137, ...)`, see `logs/deaths.py`), at its own time, after the
output before it: a death the server's output never names still opens an
event, with its last lines as the excerpt, and a death its output named is
one event. Events share the cursor (their ids are `ev:<timeNano>:<action>`),
so a restarted Sentinel neither repeats nor skips one after the saved point.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
import threading
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any

import httpx

from sentinel.backoff import exponential
from sentinel.collect.logcursor import MAX_STARTS, CursorStore, LogCursor, cursor_before
from sentinel.collect.logparse import parse_docker
from sentinel.collect.logsource import SourceHealth
from sentinel.logs.deaths import docker_event_line
from sentinel.model import LogEntry

log = logging.getLogger(__name__)

BACKOFF_MS = (1_000, 30_000)
IDLE_TIMEOUT_S = 30.0  # a follow request with nothing to say is asked again after this
MAX_QUEUE_LINES = 10_000
_HEADER = struct.Struct(">BxxxI")


class DockerApiLogSource:
    """A `LogSource` following one container's output over the Docker Engine API."""

    def __init__(self, target: str, container: str, socket_path: str, *,
                 cursor_store: CursorStore, clock: Any = time.time,
                 since_ms: int | None = None,
                 idle_timeout_s: float = IDLE_TIMEOUT_S,
                 max_queue_lines: int = MAX_QUEUE_LINES) -> None:
        self.target = target
        self.container = container
        self.name = f"docker:{container}"
        self.cursor_key = f"docker:{target}:{container}"
        self.health = SourceHealth()
        self.dropped_lines = 0
        self.reconnects = 0
        self._socket_path = socket_path
        self._store = cursor_store
        self._clock = clock
        self._since_ms = since_ms
        self._idle_timeout_s = idle_timeout_s
        self._queue: deque[tuple[int, str, str]] = deque()  # (ns, ordinal:hash id, text)
        self._max_lines = max_queue_lines
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._error: str | None = None
        self._cursor: LogCursor | None = None  # what poll() has returned up to
        # The cursor before each recent line handed out (`cursor_at`).
        self._starts: deque[tuple[LogEntry, LogCursor]] = deque(maxlen=MAX_STARTS)
        self._thread: threading.Thread | None = None
        self._events_thread: threading.Thread | None = None

    @property
    def cursor(self) -> LogCursor | None:
        """Where the lines returned so far end (saved by LogWatch with their events)."""
        return self._cursor

    def cursor_at(self, entry: LogEntry) -> LogCursor | None:
        """The cursor just before `entry` (one of the recent lines `poll` returned), or None.

        A restart that resumes there reads `entry` again: LogWatch saves it
        instead of `cursor` while an event that began at `entry` is still being
        assembled, so a kill -9 in the middle of a crash block loses none of it.
        """
        return cursor_before(self._starts, entry)

    def poll(self, now_ms: int) -> list[LogEntry]:
        """Lines read since the last poll, oldest first; never raises."""
        if self._thread is None:
            self._start()
        with self._lock:
            # by time: an event read by the other thread goes after the output before it
            batch, self._queue = sorted(self._queue, key=_first), deque()
            error = self._error
        out = []
        for item in batch:
            entry = LogEntry(target=self.target, source=self.name, t_ms=item[0] // 1_000_000,
                             text=item[2])
            if self._cursor is not None:
                self._starts.append((entry, self._cursor))
            self._cursor = _advance(self._cursor, [item])
            out.append(entry)
        if error is None:
            self.health = SourceHealth(True, None, now_ms)
        else:
            self.health = SourceHealth(False, error, self.health.last_success_ms)
        return out

    def close(self) -> None:
        """Stop the reader (the follow request ends within the idle timeout at worst)."""
        self._stop.set()
        for thread in (self._thread, self._events_thread):
            if thread is not None:
                thread.join(timeout=2)

    # -- the reader thread -----------------------------------------------------------

    def _start(self) -> None:
        stored = self._store.load(self.cursor_key)
        if stored is None:
            start_s = self._since_ms / 1000 if self._since_ms is not None else self._clock()
            stored = LogCursor(at=datetime.fromtimestamp(start_s, UTC))
        self._cursor = stored
        self._thread = threading.Thread(target=self._run, args=(stored,), daemon=True,
                                        name=f"sentinel-docker-logs-{self.container}")
        self._thread.start()
        self._events_thread = threading.Thread(
            target=self._run_events, args=(stored,), daemon=True,
            name=f"sentinel-docker-events-{self.container}")
        self._events_thread.start()

    def _run_events(self, start: LogCursor) -> None:
        """Follow the container's die and oom events from the cursor on (see the module doc)."""
        since_us, seen = _us(start.at), set(start.insert_ids)
        failures = 0
        with httpx.Client(transport=httpx.HTTPTransport(uds=self._socket_path),
                          base_url="http://docker", timeout=httpx.Timeout(
                              10.0, read=self._idle_timeout_s)) as http:
            while not self._stop.is_set():
                try:
                    since_us = self._follow_events(http, since_us, seen)
                    failures = 0
                except httpx.ReadTimeout:
                    failures = 0
                except Exception as exc:
                    failures += 1
                    log.debug("docker events of %s: %s", self.container, exc)
                    self._stop.wait(exponential(failures, *BACKOFF_MS) / 1000)

    def _follow_events(self, http: httpx.Client, since_us: int, seen: set[str]) -> int:
        """One follow request; returns the newest event's microsecond read."""
        filters = json.dumps({"container": [self.container], "type": ["container"],
                              "event": ["die", "oom"]})
        params = {"since": f"{since_us // 1_000_000}.{since_us % 1_000_000:06d}",
                  "filters": filters}
        with http.stream("GET", "/events", params=params) as resp:
            if resp.status_code != 200:
                resp.read()
                raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:200]}")
            for raw in resp.iter_lines():
                if self._stop.is_set():
                    break
                item = _event_item(raw, since_us, seen)
                if item is not None:
                    since_us = max(since_us, item[0] // 1000)
                    self._push(item)
        return since_us

    def _run(self, start: LogCursor) -> None:
        position = _Position.of(start)
        failures = 0
        with httpx.Client(transport=httpx.HTTPTransport(uds=self._socket_path),
                          base_url="http://docker", timeout=httpx.Timeout(
                              10.0, read=self._idle_timeout_s)) as http:
            while not self._stop.is_set():
                try:
                    self._follow(http, position)
                    failures = 0
                    self._set_error(None)
                except httpx.ReadTimeout:
                    failures = 0  # idle: ask again from where it stands
                except Exception as exc:
                    failures += 1
                    self._set_error(f"docker logs of {self.container}: {exc}")
                    self._stop.wait(exponential(failures, *BACKOFF_MS) / 1000)
                self.reconnects += 1

    def _follow(self, http: httpx.Client, position: _Position) -> None:
        position.rewind()
        params = {"follow": "1", "stdout": "1", "stderr": "1", "timestamps": "1",
                  "since": position.since()}
        with http.stream("GET", f"/containers/{self.container}/logs", params=params) as resp:
            if resp.status_code != 200:
                resp.read()
                raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:200]}")
            self._set_error(None)
            raw = "multiplexed" in resp.headers.get("content-type", "")
            for line in _lines(resp.iter_bytes(), multiplexed=raw):
                if self._stop.is_set():
                    return
                parsed = parse_docker(line, int(self._clock() * 1000))
                if parsed.t_ns is None:
                    continue  # not a timestamped line: nothing Docker sends with timestamps=1
                item = position.accept(parsed.t_ns, parsed.text)
                if item is not None:
                    self._push(item)

    def _push(self, item: tuple[int, str, str]) -> None:
        with self._lock:
            self._queue.append(item)
            while len(self._queue) > self._max_lines:
                self._queue.popleft()
                self.dropped_lines += 1

    def _set_error(self, error: str | None) -> None:
        with self._lock:
            self._error = error
        if error is not None:
            log.debug("%s", error)


class _Position:
    """What the reader has read: the newest microsecond (a LogCursor's precision) and the
    ids of the lines read at it, by ordinal: Docker resends them in the same order."""

    def __init__(self, us: int, ids: set[str]) -> None:
        self.us, self.ids, self._seen = us, ids, 0

    @classmethod
    def of(cls, cursor: LogCursor) -> _Position:
        return cls(_us(cursor.at), set(cursor.insert_ids))

    def rewind(self) -> None:
        """A new request: Docker sends the lines at the newest microsecond again, in order."""
        self._seen = 0

    def since(self) -> str:
        """Docker's `since`: seconds with a fraction; it sends the lines at or after it."""
        return f"{self.us // 1_000_000}.{self.us % 1_000_000:06d}"

    def accept(self, ns: int, text: str) -> tuple[int, str, str] | None:
        """The line as a queue item, or None when it was read before."""
        us = ns // 1000
        if us < self.us:
            return None
        if us > self.us:
            self.us, self.ids, self._seen = us, set(), 0
        line_id = f"{self._seen}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"
        self._seen += 1
        if line_id in self.ids:
            return None
        self.ids.add(line_id)
        return ns, line_id, text


def _event_item(raw: str, since_us: int, seen: set[str]) -> tuple[int, str, str] | None:
    """A die/oom event as a queue item (its time, id, `docker events` line), or None."""
    try:
        event = json.loads(raw)
    except ValueError:
        return None
    line = docker_event_line(event) if isinstance(event, dict) else None
    ns = event.get("timeNano") if line is not None else None
    if line is None or not isinstance(ns, int) or ns // 1000 < since_us:
        return None
    ident = f"ev:{ns}:{event.get('Action')}"
    if ident in seen:
        return None
    seen.add(ident)
    return ns, ident, line


def _first(item: tuple[int, str, str]) -> int:
    return item[0]


def _us(at: datetime) -> int:
    return int(at.replace(microsecond=0).timestamp()) * 1_000_000 + at.microsecond


def _advance(cursor: LogCursor | None, batch: list[tuple[int, str, str]]) -> LogCursor:
    """The cursor after the batch: its newest microsecond and every id read at it."""
    us = batch[-1][0] // 1000
    if cursor is not None and _us(cursor.at) > us:
        return cursor  # a late event from before the newest line: the cursor stays
    at = datetime.fromtimestamp(us // 1_000_000, UTC).replace(microsecond=us % 1_000_000)
    ids = {i for n, i, _ in batch if n // 1000 == us}
    if cursor is not None and cursor.at == at:
        ids |= cursor.insert_ids
    return LogCursor(at=at, insert_ids=frozenset(ids))


def _lines(chunks: Any, *, multiplexed: bool) -> Any:
    """Text lines from the body: frames when multiplexed, else the raw output."""
    buf = b""
    pending = b""
    for chunk in chunks:
        buf += chunk
        if multiplexed:
            while len(buf) >= _HEADER.size:
                _stream, size = _HEADER.unpack_from(buf)
                if len(buf) < _HEADER.size + size:
                    break
                pending += buf[_HEADER.size:_HEADER.size + size]
                buf = buf[_HEADER.size + size:]
        else:
            pending, buf = pending + buf, b""
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.decode("utf-8", "replace")
