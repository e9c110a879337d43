"""journald through its cursor (issue 35): a crash written while Sentinel was down, read once.

No systemd-journald runs in a test container, so the journal is real journal files in a
folder, written by `systemd-journal-remote` from the journal export format (as a host's
/var/log/journal mounted into Sentinel's container would be) and read by the real
`journalctl --directory --follow`. Both programs are required under CI=true (Debian:
systemd, systemd-journal-remote); elsewhere these tests skip without them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from fixtures_e2e import wait_for

from sentinel.collect.logcommand import journal_logs
from sentinel.incidents.db import Database
from sentinel.incidents.log_events import DbCursorStore, load_cursor
from sentinel.sim import crashlog
from sentinel.sim.server import start_sim

JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"
UNIT = "vllm.service"


@pytest.fixture(autouse=True)
def _programs() -> None:
    missing = [p for p in ("journalctl", JOURNAL_REMOTE) if shutil.which(p) is None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing} required in CI (Debian: systemd, systemd-journal-remote)")
        pytest.skip(f"{missing} not installed")


def write_journal(folder: Path, lines: Sequence[str], unit: str = UNIT) -> None:
    """Append one journal entry per line, as journald would log the unit's output."""
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")
    entries = []
    for line in lines:
        t_us = time.time_ns() // 1000
        entries.append(f"__REALTIME_TIMESTAMP={t_us}\n_BOOT_ID={boot}\n"
                       f"_SYSTEMD_UNIT={unit}\nPRIORITY=6\nMESSAGE={line}\n\n")
    subprocess.run([JOURNAL_REMOTE, "-o", str(folder / "system.journal"), "-"],
                   input="".join(entries).encode(), check=True, capture_output=True)


class _Reader:
    """A journal source and what its polls returned, its cursor saved as LogWatch saves it."""

    def __init__(self, folder: Path, store: DbCursorStore) -> None:
        self.source = journal_logs("tpu-a", UNIT, directory=str(folder), cursor_store=store)
        self.store = store
        self.texts: list[str] = []

    def read(self) -> list[str]:
        got = [e.text for e in self.source.poll(int(time.time() * 1000))]
        self.texts += got
        if got:
            assert self.source.cursor_key is not None and self.source.cursor is not None
            self.store.save(self.source.cursor_key, self.source.cursor)
        return self.texts

    def until(self, line: str) -> list[str]:
        wait_for(lambda: line in self.read(), 30, f"{line!r} from journalctl")
        return self.texts

    def following(self, folder: Path) -> list[str]:
        """Write numbered lines until one is read: journalctl reads "from now" once it runs,
        and when that is depends on the machine's load. The lines written."""
        written: list[str] = []

        def seen() -> bool:
            written.append(f"serving {len(written) + 1}")
            write_journal(folder, [written[-1]])
            return any(line in self.read() for line in written)
        wait_for(seen, 30, "journalctl to follow the journal")
        return written


def test_a_restarted_reader_gets_what_was_written_while_down_exactly_once(tmp_path: Path) -> None:
    folder = tmp_path / "journal"
    folder.mkdir()
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    db.upgrade()
    store = DbCursorStore(db)
    write_journal(folder, ["written before Sentinel ever ran"])
    first = _Reader(folder, store)  # no saved cursor: from now on
    written = first.following(folder)
    assert first.texts and set(first.texts) <= set(written)  # nothing from before it ran
    first.source.close()  # Sentinel stops
    crash = crashlog.render(crashlog.HBM_OOM, 4242)
    write_journal(folder, crash)  # the unit crashes while nobody reads
    second = _Reader(folder, store)  # Sentinel starts again, from the saved cursor
    # Lines written after the last one the first reader got (it may stop before journalctl
    # hands it the newest "serving N") are the second's, once; then every crash line once.
    unread = written[written.index(first.texts[-1]) + 1:]
    assert second.until(crash[-1]) == unread + crash
    second.source.close()
    db.dispose()


def test_without_a_saved_cursor_the_journal_is_read_from_now(tmp_path: Path) -> None:
    folder = tmp_path / "journal"
    folder.mkdir()
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    db.upgrade()
    write_journal(folder, ["old line"])
    reader = _Reader(folder, DbCursorStore(db))
    written = reader.following(folder)
    reader.until(written[-1])  # a line written just before may still have been on its way
    assert reader.texts and "old line" not in reader.texts
    assert reader.texts == written[len(written) - len(reader.texts):]  # a suffix, in order
    assert "--directory" in reader.source.argv and str(folder) in reader.source.argv
    reader.source.close()
    db.dispose()


def _daemon_config(folder: Path, sim_url: str, journal: Path) -> Path:
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
      journal: [{UNIT}]
      journal_directory: {journal}
      poll_interval: 200ms
""")
    return cfg


def _events(db: Database) -> list[tuple[str, str]]:
    from sqlalchemy import select

    from sentinel.incidents.models import LogEventRow

    with db.session() as s:
        return [(r.signature, r.source) for r in s.scalars(select(LogEventRow)
                                                           .order_by(LogEventRow.id))]


@pytest.mark.integration
@pytest.mark.parametrize("down_s", [0, pytest.param(30, marks=pytest.mark.slow)])
def test_daemon_stopped_while_the_unit_crashes_matches_the_crash_once(
        tmp_path: Path, down_s: int) -> None:
    """Sentinel follows the unit's journal, stops; the unit logs an HBM OOM crash while it is
    down (for `down_s`); the restarted Sentinel matches that crash once."""
    from sentinel.config import load_config
    from sentinel.daemon.app import App

    sim = start_sim()
    journal = tmp_path / "journal"
    journal.mkdir()
    cfg = _daemon_config(tmp_path, sim.url, journal)
    db = Database(f"sqlite:///{tmp_path / 'sentinel.db'}")
    key = f"journal:tpu-a:{UNIT}"
    app: App | None = App(load_config(cfg))
    try:
        app.start()

        def read_one() -> bool:  # "from now" starts when journalctl runs: write until read
            write_journal(journal, ["INFO: serving on :8000"])
            return load_cursor(db, key) is not None
        wait_for(read_one, 60, "Sentinel to read the journal")
        assert _events(db) == []
        app.stop(5)
        app = None
        write_journal(journal, crashlog.render(crashlog.HBM_OOM, 4242))  # nobody reads
        stopped_until = time.monotonic() + down_s
        while time.monotonic() < stopped_until:  # the downtime itself, not a wait for an event
            time.sleep(0.5)
        app = App(load_config(cfg))
        app.start()
        wait_for(lambda: _events(db), 30, "the crash to be matched after the restart")
        cursor = load_cursor(db, key)
        write_journal(journal, ["INFO: a later line"])
        wait_for(lambda: load_cursor(db, key) != cursor, 30, "Sentinel to read past the crash")
        events = _events(db)
        signatures = [sig for sig, _ in events]
        assert len(signatures) == len(set(signatures)) >= 1, events  # each matched once
        assert all(src == f"journal:{UNIT}" for _, src in events), events
        assert any("oom" in sig.lower() or "hbm" in sig.lower() for sig in signatures), events
    finally:
        if app is not None:
            app.stop(5)
        sim.stop()
        db.dispose()


def test_lines_written_after_watching_began_but_before_journalctl_runs_are_read(
        tmp_path: Path) -> None:
    """Issue 53: without a saved cursor the source reads `--since` when Sentinel began
    watching (before it said ready), not from when journalctl first ran."""
    folder = tmp_path / "journal"
    folder.mkdir()
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    db.upgrade()
    write_journal(folder, ["old line"])
    began_ms = time.time_ns() // 1_000_000 + 1  # after the old line's microsecond
    while time.time_ns() // 1_000_000 <= began_ms:
        time.sleep(0.002)
    source = journal_logs("tpu-a", UNIT, directory=str(folder),
                          cursor_store=DbCursorStore(db), since_ms=began_ms)
    crash = crashlog.render(crashlog.HBM_OOM, 4242)
    write_journal(folder, crash)  # before the first poll starts journalctl
    texts: list[str] = []

    def read() -> bool:
        texts.extend(e.text for e in source.poll(int(time.time() * 1000)))
        return crash[-1] in texts
    wait_for(read, 30, "the crash from journalctl")
    assert texts == crash  # nothing from before watching began
    source.close()
    db.dispose()
