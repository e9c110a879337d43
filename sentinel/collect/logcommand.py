"""Log lines from a following subprocess: `docker logs -f`, `journalctl -f -o json`.

The command runs from an argv list (never a shell) in its own process
group. Reader threads split its stdout (and, for docker, its stderr, where
a container's stderr comes out) into lines and push them into a bounded
queue: when the daemon falls behind, the oldest lines are dropped and
counted in `dropped_lines`, so memory stays bounded. `poll` drains the
queue and parses the lines with the time it is given.

If the command exits, `poll` records its exit code and the tail of its
stderr in `health` and starts it again after a backoff (1 s doubling to
60 s; reset after a run that lasted a minute). A restart resumes where the
last run stopped when the source can say where that was: journald's
`__CURSOR` (`--after-cursor`), or the newest docker timestamp (`--since`,
with the lines at exactly that timestamp, which docker sends again,
dropped).

journald's cursor also outlives Sentinel: given a `cursor_store`, the
journal source exposes `cursor_key` and `cursor` (a LogCursor whose one id
is journald's `__CURSOR` of the last entry `poll` returned), LogWatch saves
it with the events those lines gave, and the next Sentinel starts with
`--after-cursor` instead of `--since`, so a crash written while it was
down is read, once. Without a saved cursor it starts `--since` the time
Sentinel began watching (`since_ms`, the daemon's start, before it reports
ready), not "now" at the first poll: a crash written between "ready" and
the command's start is read too (issue 53).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import IO, Literal

from sentinel.backoff import exponential
from sentinel.collect.linesplit import DEFAULT_MAX_LINE_BYTES, LineSplitter, RawLine, decode_line
from sentinel.collect.logcursor import MAX_STARTS, CursorStore, LogCursor
from sentinel.collect.logparse import ParsedLine, parse_docker, parse_journal_json
from sentinel.collect.logsource import SourceHealth
from sentinel.model import LogEntry

log = logging.getLogger(__name__)

Parse = Literal["text", "docker", "journal-json"]
BACKOFF_MS = (1_000, 60_000)
_HEALTHY_RUN_MS = 60_000
_STDERR_TAIL_LINES = 10
_READ_BYTES = 65_536
_READER_GRACE_S = 0.5


class CommandLogSource:
    """A `LogSource` over a long-running command that prints log lines (see the module doc)."""

    def __init__(
        self,
        target: str,
        argv: Sequence[str],
        parse: Parse = "text",
        *,
        name: str | None = None,
        resume_argv: Callable[[str], Sequence[str]] | None = None,
        stderr_is_log: bool = False,
        max_queue_lines: int = 10_000,
        max_queue_bytes: int = 16 * 1024 * 1024,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        env: Mapping[str, str] | None = None,
        close_timeout_s: float = 5.0,
    ) -> None:
        if not argv:
            raise ValueError("argv must name a command")
        self.target = target
        self.argv = list(argv)
        self.parse: Parse = parse
        self.name = name or f"command:{os.path.basename(argv[0])}"
        self.health = SourceHealth()
        self.dropped_lines = 0  # dropped from a full queue, since the start
        self.restarts = 0
        self.parse_errors = 0  # lines that were not the expected format (passed on as text)
        self.resume_token: str | None = None  # where the last run stopped, if the source says
        self._resume_argv = resume_argv
        self._stderr_is_log = stderr_is_log
        self._max_lines, self._max_bytes = max_queue_lines, max_queue_bytes
        self._max_line_bytes = max_line_bytes
        self._env = dict(env) if env is not None else None
        self._close_timeout_s = close_timeout_s
        self._lock = threading.Lock()
        self._queue: deque[tuple[bool, RawLine]] = deque()  # (from stderr, line)
        self._queued_bytes = 0
        self._stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self._proc: subprocess.Popen[bytes] | None = None
        self._readers: list[threading.Thread] = []
        self._started_ms = 0
        self._next_start_ms = 0
        self._failures = 0
        self._seen_at_newest: set[str] = set()  # docker: texts at the newest timestamp
        self._newest_ns = -1
        self._parse_error: str | None = None  # the last unparsable line of this poll
        self._closed = False
        self.cursor_key: str | None = None  # set by journal_logs when positions persist
        self._resume_ms = 0  # the time of the entry `resume_token` names
        # journald's cursor before each recent line handed out (`cursor_at`).
        # (the token and its time: the LogCursor is built only when asked for)
        self._starts: deque[tuple[LogEntry, tuple[str, int]]] = deque(maxlen=MAX_STARTS)

    @property
    def cursor(self) -> LogCursor | None:
        """journald's cursor of the last entry returned, for LogWatch to save (or None)."""
        if self.cursor_key is None or self.resume_token is None:
            return None
        at = datetime.fromtimestamp(self._resume_ms / 1000, UTC)
        return LogCursor(at=at, insert_ids=frozenset({self.resume_token}))

    def cursor_at(self, entry: LogEntry) -> LogCursor | None:
        """journald's cursor just before `entry` (a recent line `poll` returned), or None.

        LogWatch saves it instead of `cursor` while an event that began at
        `entry` is still being assembled: a restart resumes `--after-cursor`
        the record before it, so a kill -9 in the middle of a crash block
        reads the whole block again and loses none of it.
        """
        for found, (token, ms) in reversed(self._starts):
            if found is entry:
                return LogCursor(at=datetime.fromtimestamp(ms / 1000, UTC),
                                 insert_ids=frozenset({token}))
        return None

    def resume_from(self, store: CursorStore, key: str) -> None:
        """Persist positions under `key`; start after the saved one, if there is one."""
        self.cursor_key = key
        saved = store.load(key)
        if saved is not None and len(saved.insert_ids) == 1:
            (self.resume_token,) = saved.insert_ids
            self._resume_ms = int(saved.at.timestamp() * 1000)

    @property
    def pid(self) -> int | None:
        """The running command's process id, if one is running."""
        return self._proc.pid if self._proc is not None else None

    def poll(self, now_ms: int) -> list[LogEntry]:
        """Lines printed since the last poll; (re)starts the command when due; never raises."""
        out: list[LogEntry] = []
        if self._closed:
            return out
        try:
            if self._proc is None and now_ms >= self._next_start_ms:
                self._start(now_ms)
            exited = self._proc is not None and self._proc.poll() is not None
            if exited:
                self._reap()  # readers finish first, so no line is left in the pipes
            out = self._parse(self._drain(), now_ms)
            if exited:
                self._exited(now_ms)
            elif self._proc is not None:  # running; an unparsable line is on record for a poll
                self.health = SourceHealth(self._parse_error is None, self._parse_error, now_ms)
        except Exception as e:  # one bad command never stops the loop
            self._failed(f"{type(e).__name__}: {e}")
        return out

    def close(self) -> None:
        """Stop the command for good: SIGTERM to its process group, SIGKILL after the timeout."""
        self._closed = True
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:  # not reaped yet, so its pid is still our group's id
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(self._close_timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        self._join_readers(proc)

    # -- the process -------------------------------------------------------------------

    def _start(self, now_ms: int) -> None:
        argv = self.argv
        if self.resume_token is not None and self._resume_argv is not None:
            argv = list(self._resume_argv(self.resume_token))
        try:
            proc = subprocess.Popen(  # noqa: S603 - an argv list from config, no shell
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._env,
                start_new_session=True,  # its own group, so close() reaches its children
            )
        except OSError as e:
            self._schedule_restart(now_ms)
            self._failed(f"cannot start {argv[0]}: {e}")
            return
        self._proc, self._started_ms = proc, now_ms
        assert proc.stdout is not None and proc.stderr is not None
        self._readers = [
            threading.Thread(target=self._read, args=(proc.stdout, False), daemon=True),
            threading.Thread(target=self._read, args=(proc.stderr, True), daemon=True),
        ]
        for t in self._readers:
            t.start()
        log.info("log source %s: started %s (pid %d)", self.name, argv[0], proc.pid)

    def _reap(self) -> None:
        assert self._proc is not None
        self._join_readers(self._proc)

    def _join_readers(self, proc: subprocess.Popen[bytes]) -> None:
        """Wait for the readers to reach end of file (the exited command's last lines)."""
        for t in self._readers:
            t.join(_READER_GRACE_S)
        if any(t.is_alive() for t in self._readers):
            # A child of the command still holds the pipes open, so the group still has
            # members and its id is still ours: kill it, or the readers never finish.
            _signal_group(proc, signal.SIGKILL)
            for t in self._readers:
                t.join(self._close_timeout_s)
        self._readers = []

    def _exited(self, now_ms: int) -> None:
        assert self._proc is not None
        code = self._proc.returncode
        self._proc = None
        with self._lock:
            tail = " | ".join(self._stderr_tail)
        if now_ms - self._started_ms >= _HEALTHY_RUN_MS:
            self._failures = 0
        self._schedule_restart(now_ms)
        self.restarts += 1
        self._failed(f"{self.argv[0]} exited with code {code}" + (f": {tail}" if tail else ""))

    def _schedule_restart(self, now_ms: int) -> None:
        first, most = BACKOFF_MS
        self._next_start_ms = now_ms + exponential(self._failures + 1, first, most)
        self._failures = min(self._failures + 1, 16)

    def _failed(self, error: str) -> None:
        if error != self.health.last_error:
            log.warning("log source %s: %s", self.name, error)
        self.health = SourceHealth(False, error, self.health.last_success_ms)

    # -- the reader threads and the queue ------------------------------------------------

    def _read(self, stream: IO[bytes], is_stderr: bool) -> None:
        """Reader thread: split one pipe into lines until end of file."""
        lines = LineSplitter(self._max_line_bytes)
        fd = stream.fileno()
        try:
            while chunk := os.read(fd, _READ_BYTES):
                self._push(lines.feed(chunk), is_stderr)
            last = lines.flush()
            self._push([last] if last is not None else [], is_stderr)
        except OSError as e:  # the pipe closed under us by close(): nothing more to read
            log.debug("log source %s: reader stopped: %s", self.name, e)
        finally:
            stream.close()

    def _push(self, lines: list[RawLine], is_stderr: bool) -> None:
        with self._lock:
            for raw in lines:
                if is_stderr:
                    self._stderr_tail.append(decode_line(raw)[:500])
                    if not self._stderr_is_log:
                        continue
                self._queue.append((is_stderr, raw))
                self._queued_bytes += len(raw.data)
                while len(self._queue) > self._max_lines or self._queued_bytes > self._max_bytes:
                    self._queued_bytes -= len(self._queue.popleft()[1].data)
                    self.dropped_lines += 1

    def _drain(self) -> list[tuple[bool, RawLine]]:
        with self._lock:
            lines = list(self._queue)
            self._queue.clear()
            self._queued_bytes = 0
        return lines

    # -- parsing ---------------------------------------------------------------------------

    def _parse(self, lines: list[tuple[bool, RawLine]], now_ms: int) -> list[LogEntry]:
        self._parse_error = None
        out: list[LogEntry] = []
        for is_stderr, raw in lines:
            # journald's cursor before this record (None: not kept, or none read yet)
            token = self.resume_token if self.cursor_key is not None else None
            before = None if token is None else (token, self._resume_ms)
            for p in self._parse_one(decode_line(raw), is_stderr, now_ms):
                entry = LogEntry(self.target, self.name, p.t_ms, p.text)
                if before is not None:
                    self._starts.append((entry, before))
                out.append(entry)
        return out

    def _parse_one(self, text: str, is_stderr: bool, now_ms: int) -> list[ParsedLine]:
        if self.parse == "text":
            return [ParsedLine(now_ms, text)]
        if self.parse == "docker":
            p = parse_docker(text, now_ms)
            if is_stderr and p.resume_token is None:
                return []  # docker's own message ("No such container"), kept for health only
            return self._docker(p)
        parsed, cursor, error = parse_journal_json(text, now_ms)
        if error is not None:
            self._parse_error = error
            self.parse_errors += 1
        if cursor is not None:
            self.resume_token = cursor
            self._resume_ms = parsed[-1].t_ms if parsed else now_ms
        return parsed

    def _docker(self, p: ParsedLine) -> list[ParsedLine]:
        """Drop the lines docker sends again after a restart `--since` the newest timestamp."""
        if p.resume_token is None or p.t_ns is None:
            return [p]
        if p.t_ns == self._newest_ns:
            if p.text in self._seen_at_newest:
                return []
            if len(self._seen_at_newest) < 10_000:
                self._seen_at_newest.add(p.text)
        elif p.t_ns > self._newest_ns:
            self._newest_ns = p.t_ns
            self._seen_at_newest = {p.text}
            self.resume_token = p.resume_token
        return [p]


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # already gone (and reaped: the group id is no longer ours)


def docker_logs(
    target: str, container: str, docker: str = "docker", **kwargs: object
) -> CommandLogSource:
    """Follow a container's output from now on: `docker logs --follow --timestamps`."""

    def argv(since: str) -> list[str]:
        return [docker, "logs", "--follow", "--timestamps", "--since", since, container]

    return CommandLogSource(
        target,
        argv("0s"),
        "docker",
        name=f"docker:{container}",
        resume_argv=argv,
        stderr_is_log=True,  # vLLM logs to stderr; docker passes the container's stderr on
        **kwargs,  # type: ignore[arg-type]
    )


def journal_logs(
    target: str, unit: str, journalctl: str = "journalctl", *, directory: str | None = None,
    cursor_store: CursorStore | None = None, since_ms: int | None = None, **kwargs: object
) -> CommandLogSource:
    """Follow a systemd unit's journal: `journalctl --follow --output=json`.

    From the cursor saved in `cursor_store` when there is one, else from
    `since_ms` (epoch milliseconds), else from the command's start ("now").
    `directory`: read the journal files there (a host's journal mounted in a container).
    """
    base = [journalctl, "--follow", "--output=json", "--no-tail", "--no-pager", "--unit", unit]
    if directory is not None:
        base[1:1] = ["--directory", directory]
    source = CommandLogSource(
        target,
        [*base, "--since", _journal_since(since_ms)],
        "journal-json",
        name=f"journal:{unit}",
        resume_argv=lambda cursor: [*base, "--after-cursor", cursor],
        **kwargs,  # type: ignore[arg-type]
    )
    if cursor_store is not None:
        source.resume_from(cursor_store, f"journal:{target}:{unit}")
    return source


def _journal_since(since_ms: int | None) -> str:
    """journalctl's `--since`: "@<epoch seconds>" (a fraction is kept), or "now"."""
    if since_ms is None:
        return "now"
    return f"@{since_ms // 1000}.{since_ms % 1000:03d}"
