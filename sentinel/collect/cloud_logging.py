"""A `LogSource` over Cloud Logging: `entries:list` with google-cloud-logging's client.

Each poll asks for the target's entries from the cursor on, oldest first,
page by page (`list_entries` follows `nextPageToken`):

    (<filter>) AND timestamp>="<cursor>" AND timestamp<="<now - settle>"

The cursor is the last timestamp read plus the insertIds read at exactly
that timestamp (`LogCursor`), kept in a `CursorStore` (the database), so a
restarted daemon neither misses an entry nor counts one twice, even when
entries sharing a timestamp straddle a page or a poll. Reading stops
`settle_ms` short of now, because Cloud Logging makes entries visible a few
seconds after their timestamp; a cursor that ran ahead of them would skip
them. The first poll of a new source starts `initial_lookback_ms` back.

Failures never escape `poll`: 429 and 5xx back off exponentially with jitter
(honouring Retry-After), permanent errors wait the longest delay, and `poll`
returns [] until the delay has passed, so the read quota is never
hammered. Entries read before a failure are kept and the cursor moves past
them. A malformed entry (not an object, binary junk, 10 MB of text) is
bounded and made printable (`entrytext`), counted by reason in
`malformed`, logged once per reason, and never stops the source.

Multi-line payloads (a whole traceback in one textPayload) become one
`LogEntry` per line, all with the entry's timestamp and insertId, so the
line-oriented classifier sees every line.

Credentials: Application Default Credentials in production
(`make_client(project)`); tests pass `AnonymousCredentials` and the fake's
`http://127.0.0.1:PORT` endpoint with the REST transport.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sentinel.backoff import Backoff
from sentinel.collect.entrytext import DEFAULT_MAX_CHARS, entry_text
from sentinel.collect.gcp import DEFAULT_BASE_MS, DEFAULT_MAX_MS, classify_error
from sentinel.collect.logcursor import MAX_STARTS, CursorStore, LogCursor, cursor_before
from sentinel.collect.logsource import SourceHealth
from sentinel.model import LogEntry

log = logging.getLogger(__name__)

# vLLM on a TPU VM: the worker's stderr (where Python tracebacks, XLA and
# the engine write; Cloud Logging gives such lines no severity) plus
# anything the agents marked WARNING or worse.
DEFAULT_FILTER = 'resource.type="tpu_worker" AND (logName:"stderr" OR severity>=WARNING)'
_TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def default_filter(node_id: str | None = None) -> str:
    """The default filter, narrowed to one TPU node (`resource.labels.node_id`) if given."""
    if not node_id:
        return DEFAULT_FILTER
    quoted = node_id.replace("\\", "\\\\").replace('"', '\\"')
    return f'{DEFAULT_FILTER} AND resource.labels.node_id="{quoted}"'


def make_client(project: str, *, api_endpoint: str | None = None,
                credentials: Any = None) -> Any:
    """A google-cloud-logging `Client` on the REST transport.

    `credentials=None` means Application Default Credentials; tests pass
    `AnonymousCredentials()` and `api_endpoint="http://127.0.0.1:PORT"`.
    The project is always explicit, so the library never asks the metadata
    server for one.
    """
    from google.cloud import logging as gcl  # imported late: the import is slow

    options = {"api_endpoint": api_endpoint} if api_endpoint else None
    return gcl.Client(project=project, credentials=credentials, _use_grpc=False,
                      client_options=options)


@dataclass(frozen=True, slots=True)
class CloudLoggingOptions:
    """Tuning of one Cloud Logging source; the defaults suit a 15-30 s poll."""

    page_size: int = 1000  # the API's maximum; fewer requests against the quota
    max_entries_per_poll: int = 10_000  # bounds one poll's time and memory
    initial_lookback_ms: int = 10 * 60_000
    settle_ms: int = 10_000
    max_text_chars: int = DEFAULT_MAX_CHARS
    backoff_base_ms: int = DEFAULT_BASE_MS
    backoff_max_ms: int = DEFAULT_MAX_MS


class CloudLoggingSource:
    """Poll one target's Cloud Logging entries into `LogEntry` lines (a `LogSource`).

    `auto_commit=True` saves the cursor at the end of every poll (a crash
    before the entries are processed loses them). With `auto_commit=False`
    the caller saves `cursor` under `cursor_key` in the same transaction as
    the events it derived (`record_log_events(..., cursors=...)`).
    """

    def __init__(self, target: str, project: str, *, cursor_store: CursorStore,
                 client_factory: Callable[[], Any] | None = None, filter: str | None = None,
                 options: CloudLoggingOptions | None = None, rng: random.Random | None = None,
                 auto_commit: bool = True) -> None:
        self.target = target
        self.project = project
        self.name = f"cloud-logging:{project}"
        self.cursor_key = f"cloud-logging:{target}"
        self.filter = filter or DEFAULT_FILTER
        self.options = options or CloudLoggingOptions()
        self.health = SourceHealth()
        self.malformed: Counter[str] = Counter()
        self.requests_made = 0
        self._store = cursor_store
        self._factory = client_factory or (lambda: make_client(project))
        self._client: Any = None
        self._cursor: LogCursor | None = None
        # The cursor before each recent line handed out (`cursor_at`).
        self._starts: deque[tuple[LogEntry, LogCursor]] = deque(maxlen=MAX_STARTS)
        self._auto_commit = auto_commit
        self._backoff = Backoff(self.options.backoff_base_ms, self.options.backoff_max_ms, rng)

    @property
    def cursor(self) -> LogCursor | None:
        """Where the source stands (after the last poll); None before the first."""
        return self._cursor

    def cursor_at(self, entry: LogEntry) -> LogCursor | None:
        """The cursor just before `entry`'s Cloud Logging entry (a recent line `poll`
        returned), or None: LogWatch saves it while an event that began at `entry` is
        still being assembled, so a kill -9 in the middle of a crash block loses none of it."""
        return cursor_before(self._starts, entry)

    def poll(self, now_ms: int) -> list[LogEntry]:
        """New entries since the cursor, oldest first; [] while backing off. Never raises."""
        if not self._backoff.ready(now_ms):
            return []
        try:
            start = self._start_cursor(now_ms)
            client = self._client = self._client or self._factory()
        except Exception as exc:  # recorded in health, never raised
            self._failed(now_ms, exc)
            return []
        reader = _Reader(self, start)
        error: Exception | None = None
        try:
            self.requests_made += 1
            for entry in client.list_entries(
                resource_names=[f"projects/{self.project}"],
                filter_=self._query(start, now_ms), order_by="timestamp asc",
                page_size=self.options.page_size,
            ):
                if reader.take(entry) >= self.options.max_entries_per_poll:
                    break
        except Exception as exc:  # one bad read never stops the source
            error = exc
        self._advance(reader.cursor, now_ms)
        if error is not None:
            self._failed(now_ms, error)
        else:
            self._backoff.succeeded()
            self.health = replace(self.health, ok=True, last_success_ms=now_ms)
        return reader.out

    def close(self) -> None:
        """Close the client's HTTP session."""
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception as exc:  # closing is best effort
                log.debug("%s: close failed: %s", self.name, exc)

    def _start_cursor(self, now_ms: int) -> LogCursor:
        if self._cursor is None:
            stored = self._store.load(self.cursor_key)
            if stored is None:
                start = datetime.fromtimestamp(
                    (now_ms - self.options.initial_lookback_ms) / 1000, tz=UTC)
                stored = LogCursor(start)
                self._store.save(self.cursor_key, stored)  # a restart resumes from here
            self._cursor = stored
        return self._cursor

    def _query(self, start: LogCursor, now_ms: int) -> str:
        until = datetime.fromtimestamp((now_ms - self.options.settle_ms) / 1000, tz=UTC)
        return (f'({self.filter}) AND timestamp>="{start.at.strftime(_TS_FORMAT)}"'
                f' AND timestamp<="{until.strftime(_TS_FORMAT)}"')

    def _advance(self, cursor: LogCursor, now_ms: int) -> None:
        if cursor == self._cursor:
            return
        self._cursor = cursor
        if not self._auto_commit:
            return
        try:
            self._store.save(self.cursor_key, cursor)
        except Exception as exc:  # kept in memory; saved on a later poll
            self._failed(now_ms, exc, back_off=False)

    def _failed(self, now_ms: int, exc: BaseException, *, back_off: bool = True) -> None:
        kind = classify_error(exc)
        delay = self._backoff.failed(now_ms, kind) if back_off else 0
        if self.health.ok or self.health.last_error != kind.detail:
            log.warning("%s (target %s): %s; next try in %.1f s",
                        self.name, self.target, kind.detail, delay / 1000)
        self.health = replace(self.health, ok=False, last_error=kind.detail)

    def note_malformed(self, insert_id: str, problems: tuple[str, ...]) -> None:
        """Count a malformed entry by reason; log the first of each reason."""
        for reason in problems:
            if self.malformed[reason] == 0:
                log.warning("%s (target %s): entry %s: %s (logged once per reason)",
                            self.name, self.target, insert_id, reason)
            self.malformed[reason] += 1


class _Reader:
    """Turns one poll's entries into lines, moving the cursor and dropping repeats."""

    def __init__(self, source: CloudLoggingSource, start: LogCursor) -> None:
        self.source = source
        self.cursor = start
        self.out: list[LogEntry] = []
        self.taken = 0

    def take(self, entry: Any) -> int:
        """Handle one client entry; how many entries were taken so far this poll."""
        src = self.source
        text = entry_text(entry.payload, src.options.max_text_chars)
        iid = entry.insert_id or _synthetic_id(entry.log_name, text.text)
        at = entry.timestamp
        problems = text.problems
        if not isinstance(at, datetime):
            at, problems = self.cursor.at, (*problems, "no_timestamp")
        at = at.astimezone(UTC)
        if at < self.cursor.at or (at == self.cursor.at and iid in self.cursor.insert_ids):
            return self.taken  # read before (the boundary timestamp is asked for again)
        ids = self.cursor.insert_ids | {iid} if at == self.cursor.at else frozenset({iid})
        before, self.cursor = self.cursor, LogCursor(at, ids)
        self.taken += 1
        if problems:
            src.note_malformed(iid, problems)
        t_ms = (at - _EPOCH) // timedelta(milliseconds=1)
        for line in text.text.splitlines():
            out = LogEntry(src.target, src.name, t_ms, line, insert_id=iid)
            src._starts.append((out, before))  # every line of the entry: read again from it
            self.out.append(out)
        return self.taken


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _synthetic_id(log_name: Any, text: str) -> str:
    # The API always sets insertId; should one be missing, the entry's own
    # content still tells a repeat from a new entry at the same timestamp.
    digest = hashlib.sha256(f"{log_name}\n{text}".encode()).hexdigest()[:16]
    return f"sha256:{digest}"
