"""A kill -9 in the middle of a crash block loses nothing, whatever cursor the source keeps.

LogWatch saves where a source stands with the events it derived. While an
event is still being assembled (its signature's context-after lines not yet
read) its lines are read but not on record: a cursor saved past them would
make a restarted Sentinel start after the crash's naming line, and the crash
would never be an event. So the cursor saved is the one before the open
event's first line (`cursor_at`), as a file source's position is
(`position_at`, issue 51). Real formats: the simulator's Docker socket
(Engine API logs, multiplexed, `since`), and journal files written by
`systemd-journal-remote` read by the real `journalctl --follow`.

The kill is a LogWatch and a source dropped without a flush after a poll
that returned the block's first half, which is what a SIGKILL leaves behind:
the database as of that poll's transaction.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures_e2e import wait_for
from sqlalchemy import select

from sentinel.collect.dockerapi_logs import DockerApiLogSource
from sentinel.collect.logcommand import journal_logs
from sentinel.daemon.logwatch import LogWatch
from sentinel.incidents.db import Database
from sentinel.incidents.log_events import DbCursorStore
from sentinel.incidents.models import LogEventRow
from sentinel.logs import load_signature_file
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import start_sim
from sentinel.store import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
# The naming line opens the event; its context-after lines (cuda_oom keeps 10) are
# still to come when Sentinel dies. The second half names nothing on its own.
# One line: a quiet poll between two lines of the half would close the event before the kill.
FIRST = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
         "GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is free."]
SECOND = [f"INFO 12-07 10:00:0{i} [launcher.py:2] cleaning up worker {i}" for i in range(2, 9)]


class _Sentinel:
    """One Sentinel process's log stage: a LogWatch over one source, and the texts polled."""

    def __init__(self, db: Database, source: Any) -> None:
        self.watch = LogWatch(MemoryStore(), db, load_signature_file(ROOT / "rules" /
                                                                     "signatures.yaml"))
        self.source = source
        self.texts: list[str] = []
        poll = source.poll

        def recording(now_ms: int) -> list[Any]:
            got = poll(now_ms)
            self.texts += [e.text for e in got]
            return got
        source.poll = recording

    def poll(self) -> None:
        self.watch.poll(self.source, int(time.time() * 1000))

    def until(self, line: str) -> None:
        """Poll until `line` was read (polls that read nothing flush, as the daemon's do)."""
        def seen() -> bool:
            self.poll()
            return line in self.texts
        wait_for(seen, 30, f"{line!r} to be read")


def _events(db: Database) -> list[tuple[str, str, str]]:
    with db.session() as s:
        return [(r.category, r.signature, r.excerpt) for r in
                s.scalars(select(LogEventRow).order_by(LogEventRow.id))]


def _killed_mid_block(db: Database, start: Callable[[], Any],
                      write: Callable[[list[str]], None]) -> None:
    """Run one Sentinel until it read the block's first half, drop it, write the rest, and
    let a second Sentinel (from the saved cursor) read on: one event for the block."""
    first = _Sentinel(db, start())
    marks: list[str] = []

    def following() -> bool:  # "from now on" begins when the follower runs: write until read
        marks.append(f"INFO serving {len(marks) + 1}")
        write([marks[-1]])
        first.poll()
        return any(m in first.texts for m in marks)
    wait_for(following, 30, "the follower to start")
    write(FIRST)
    # The poll that returns it leaves the event open: the kill point.
    wait_for(lambda: (first.poll(), FIRST[-1] in first.texts)[1], 30, "the first half")
    assert first.watch._classifiers[first.source.name].pending is not None
    first.source.close()  # kill -9: no flush, nothing after the last poll's transaction
    assert _events(db) == []
    write(SECOND)
    second = _Sentinel(db, start())
    second.until(SECOND[-1])
    second.poll()  # a quiet poll closes the event
    wait_for(lambda: (second.poll(), _events(db))[1], 30, "the event after the restart")
    events = _events(db)
    assert [(c, s) for c, s, _ in events] == [("cuda_oom", "cuda_oom")], events
    assert FIRST[0] in events[0][2]  # the excerpt starts from the naming line, read again
    assert second.texts[:len(FIRST)] == FIRST  # the block re-read from its first line, once
    second.source.close()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 's.db'}")
    database.upgrade()
    yield database
    database.dispose()


def test_docker_engine_api_follower_killed_mid_block_loses_nothing(db: Database) -> None:
    sim = start_sim()
    folder = Path(tempfile.mkdtemp(prefix="mb-", dir="/tmp"))  # unix socket paths are short
    path = str(folder / "docker.sock")
    sock = serve_container(sim, ContainerSpec(name="vllm"), path)
    try:
        _killed_mid_block(
            db, lambda: DockerApiLogSource("tpu-a", "vllm", path, cursor_store=DbCursorStore(db)),
            sim.container.print)
    finally:
        sock.stop()
        sim.stop()
        shutil.rmtree(folder, ignore_errors=True)


def test_journald_follower_killed_mid_block_loses_nothing(db: Database, tmp_path: Path) -> None:
    from test_journal_resume import JOURNAL_REMOTE, UNIT, write_journal

    missing = [p for p in ("journalctl", JOURNAL_REMOTE) if shutil.which(p) is None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing} required in CI (Debian: systemd, systemd-journal-remote)")
        pytest.skip(f"{missing} not installed")
    folder = tmp_path / "journal"
    folder.mkdir()
    _killed_mid_block(
        db, lambda: journal_logs("tpu-a", UNIT, directory=str(folder),
                                 cursor_store=DbCursorStore(db)),
        lambda lines: write_journal(folder, lines))


def test_cloud_logging_poller_killed_mid_block_loses_nothing(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same on Cloud Logging (the real client against the local fake of its REST API),
    with the cursor saved by LogWatch (auto_commit off, as the daemon runs it)."""
    import random

    from fakes.cloud_logging_server import running_fake
    from fakes.offline import offline_google_env
    from google.auth.credentials import AnonymousCredentials

    from sentinel.collect.cloud_logging import CloudLoggingOptions, CloudLoggingSource, make_client

    offline_google_env(monkeypatch)
    now = 1_795_000_000_000
    with running_fake("p") as fake:
        def start() -> CloudLoggingSource:
            return CloudLoggingSource(
                "tpu-a", "p", cursor_store=DbCursorStore(db), auto_commit=False,
                client_factory=lambda: make_client("p", api_endpoint=fake.endpoint,
                                                   credentials=AnonymousCredentials()),
                options=CloudLoggingOptions(), rng=random.Random(7))

        def add(lines: list[str], at_ms: int) -> None:
            for i, line in enumerate(lines):
                fake.add((at_ms + i) * 1_000_000, line)

        first = _Sentinel(db, start())
        add(["INFO serving 1", *FIRST], now - 60_000)
        first.watch.poll(first.source, now)
        assert FIRST[-1] in first.texts
        assert first.watch._classifiers[first.source.name].pending is not None
        first.source.close()  # kill -9 after the poll's transaction
        assert _events(db) == []
        add(SECOND, now - 50_000)
        second = _Sentinel(db, start())
        second.watch.poll(second.source, now + 1_000)
        second.watch.poll(second.source, now + 1_000 + 60_000)  # quiet: the event closes
        events = _events(db)
        assert [(c, s) for c, s, _ in events] == [("cuda_oom", "cuda_oom")], events
        assert second.texts[:len(FIRST) + len(SECOND)] == FIRST + SECOND
