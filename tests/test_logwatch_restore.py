"""The signature counters come back from the database (issue 33): a restarted daemon, or a
new HA leader whose store never counted the lines, evaluates a crash rule as the daemon
that counted them would have, at every time the test hands in."""

from __future__ import annotations

from dataclasses import dataclass, field

from sentinel.collect.logsource import SourceHealth
from sentinel.daemon.logwatch import LogWatch
from sentinel.incidents.db import Database
from sentinel.logs.signatures import load_signature_file
from sentinel.model import LogEntry
from sentinel.promql.engine import Engine
from sentinel.sim.crashlog import HBM_OOM, render
from sentinel.store import MemoryStore

T0 = 1_795_000_000_000
RULE = ('sum by (target) (increase(sentinel_log_signature_matches_total'
        '{category="hbm_oom"}[30s])) > 0')


@dataclass
class _Lines:
    """A log source that hands out what the test queued."""

    target: str = "tpu-a"
    name: str = "file:vllm.log"
    health: SourceHealth = field(default_factory=SourceHealth)
    queued: list[str] = field(default_factory=list)

    def poll(self, now_ms: int) -> list[LogEntry]:
        lines, self.queued = self.queued, []
        return [LogEntry(self.target, self.name, now_ms, text) for text in lines]

    def close(self) -> None:
        pass


def _watch(db: Database) -> LogWatch:
    return LogWatch(MemoryStore(retention_ms=90_000), db,
                    load_signature_file("rules/signatures.yaml"))


def _fires(watch: LogWatch, at_ms: int) -> bool:
    return bool(Engine(watch.store).query(RULE, at_ms))


def _crash(watch: LogWatch, source: _Lines, at_ms: int) -> None:
    """Polls every 100 ms around a crash written at `at_ms`, as the daemon would."""
    for t in range(at_ms - 1000, at_ms, 100):
        watch.poll(source, t)
    source.queued = render(HBM_OOM, pid=7)
    for t in range(at_ms, at_ms + 2000, 100):
        watch.poll(source, t)


def test_a_restarted_watch_fires_until_the_crash_leaves_the_window(incident_db) -> None:
    first, source = _watch(incident_db), _Lines()
    _crash(first, source, T0)
    assert _fires(first, T0 + 5_000)
    assert _fires(first, T0 + 29_000) and not _fires(first, T0 + 31_000)

    restarted = _watch(incident_db)  # a new process: an empty store
    restarted.restore(["tpu-a"], T0 + 5_000)
    for at in (T0 + 5_000, T0 + 20_000, T0 + 29_000):
        restarted.poll(_Lines(), at)  # polls go on, finding nothing new
        assert _fires(restarted, at), at
    restarted.poll(_Lines(), T0 + 31_000)
    assert not _fires(restarted, T0 + 31_000)


def test_a_new_leader_counts_what_the_old_one_saw_while_it_stood_by(incident_db) -> None:
    leader, standby, source = _watch(incident_db), _watch(incident_db), _Lines()
    standby.restore(["tpu-a"], T0 - 10_000)  # at its start: nothing on record yet
    _crash(leader, source, T0)
    standby.restore(["tpu-a"], T0 + 3_000)  # it takes over
    assert _fires(standby, T0 + 3_000)
    standby.poll(_Lines(), T0 + 28_000)
    assert _fires(standby, T0 + 28_000)
    standby.poll(_Lines(), T0 + 32_000)
    assert not _fires(standby, T0 + 32_000)


def test_nothing_on_record_restores_zeros_and_the_next_crash_is_an_increase(
        incident_db) -> None:
    watch, source = _watch(incident_db), _Lines()
    watch.restore(["tpu-a"], T0 - 1_000)
    assert not _fires(watch, T0 - 1_000)
    source.queued = render(HBM_OOM, pid=7)  # the very first poll finds the crash
    for t in range(T0, T0 + 2000, 100):
        watch.poll(source, t)
    assert _fires(watch, T0 + 2_000)
