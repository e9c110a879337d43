"""The leader lease on a real PostgreSQL: one holder, takeover after expiry, fencing (issue 16)."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from sentinel.config import Config
from sentinel.daemon.leader import FencedDatabase, LeaderLease, NotLeader
from sentinel.incidents.db import Database

STALL_S = 60.0  # how long the "stopped" leader would hold its transaction open


class Clock:
    """A monotonic clock the test moves (the local deadline), beside the real database clock."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def pg(fresh_postgres_url: str):
    db = Database(fresh_postgres_url)
    db.upgrade()
    yield db
    db.dispose()


def _lease(db: Database, holder: str, lease_ms: int = 1000, **kw) -> LeaderLease:
    return LeaderLease(db, lease_ms, "test", holder, **kw)


def _take_over(b: LeaderLease, timeout_s: float = 30.0) -> float:
    """Run b's rounds until it leads (the database clock ends a's lease); seconds it took.

    Polls instead of sleeping past the lease: on a loaded machine a fixed sleep is either
    too short or wasted."""
    started = time.monotonic()
    deadline = started + timeout_s
    while not b.is_leader():
        assert time.monotonic() < deadline, f"b did not take the lease in {timeout_s:.0f}s"
        b._round()
        if not b.is_leader():
            time.sleep(0.05)  # poll interval, not a wait for an event
    return time.monotonic() - started


def _write(db: Database, value: str) -> None:
    with db.session() as s:
        s.execute(text("CREATE TABLE IF NOT EXISTS ha_probe (v text)"))
        s.execute(text("INSERT INTO ha_probe VALUES (:v)"), {"v": value})


def test_one_holder_renewal_keeps_it_and_expiry_hands_it_over_with_a_new_epoch(pg):
    a, b = _lease(pg, "a"), _lease(pg, "b")
    a._round()
    b._round()
    assert a.is_leader() and a.epoch == 1
    assert not b.is_leader() and b.other == "a"
    a._round()  # renewal
    b._round()
    assert a.is_leader() and not b.is_leader()
    _take_over(b)  # a stops renewing (killed): the database clock lets it run out
    assert b.is_leader() and b.epoch == 2
    a._round()  # the old holder's renewal finds the row moved on
    assert not a.is_leader()


def test_the_fence_refuses_an_old_epoch_and_rolls_its_work_back(pg):
    a, b = _lease(pg, "a"), _lease(pg, "b")
    a._round()
    fenced_a = FencedDatabase(pg, a.fence)
    _write(fenced_a, "a1")
    _take_over(b)
    assert b.is_leader()
    a._state = a._state.__class__(a._state.epoch, 0.0, float("inf"))  # a believes it leads
    with pytest.raises(NotLeader):
        _write(fenced_a, "a2")
    _write(FencedDatabase(pg, b.fence), "b1")
    with pg.session() as s:
        assert [r[0] for r in s.execute(text("SELECT v FROM ha_probe ORDER BY v"))] == ["a1", "b1"]
    assert not a.is_leader()  # the fence told it


def test_a_local_deadline_past_means_no_action_even_before_the_database_says_so(pg):
    clock = Clock()
    a = _lease(pg, "a", monotonic=clock)
    a._round()
    assert a.is_leader()
    clock.t += 1.0  # a lease period on the local clock without renewal (stopped, starved)
    assert not a.is_leader()
    with pytest.raises(NotLeader):
        _write(FencedDatabase(pg, a.fence), "late")


def test_a_leader_stalled_inside_a_fenced_transaction_cannot_block_the_takeover(pg):
    """SIGSTOP between statements: the share lock would hold the row; the server ends the
    session after a third of the lease, the takeover goes through and the stalled work is lost."""
    a, b = _lease(pg, "a", lease_ms=1500), _lease(pg, "b", lease_ms=1500)
    a._round()
    fenced = FencedDatabase(pg, a.fence)
    stalled: dict[str, object] = {}
    locked, release = threading.Event(), threading.Event()

    def stall() -> None:
        try:
            with fenced.session() as s:
                s.execute(text("CREATE TABLE IF NOT EXISTS ha_probe (v text)"))
                s.execute(text("INSERT INTO ha_probe VALUES ('stalled')"))
                locked.set()
                release.wait(STALL_S)  # "stopped" with the row locked FOR SHARE
        except Exception as exc:
            stalled["error"] = exc

    t = threading.Thread(target=stall)
    t.start()
    assert locked.wait(30), "the fenced transaction never started"
    # Without the server's idle timeout, b's rounds wait on the row lock until the stall
    # ends (STALL_S): then the takeover would come only after a's work committed.
    took = _take_over(b, timeout_s=STALL_S / 2)
    release.set()
    t.join(30)
    print(f"takeover {took:.2f}s after the stall began (lease 1.5 s)")
    assert "error" in stalled, "the stalled transaction committed after the takeover"
    with pg.session() as s:
        s.execute(text("CREATE TABLE IF NOT EXISTS ha_probe (v text)"))
        assert s.execute(text("SELECT count(*) FROM ha_probe")).scalar() == 0


def test_stop_hands_the_lease_back_at_once(pg):
    a, b = _lease(pg, "a", lease_ms=10_000), _lease(pg, "b", lease_ms=10_000)
    a._round()
    a.stop()
    b._round()
    assert b.is_leader() and b.epoch == 2


def test_on_sqlite_the_daemon_is_always_the_leader(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    db.upgrade()
    elected: list[int] = []
    a = _lease(db, "a", on_elected=elected.append)
    a._round()
    assert a.is_leader() and elected == [1]
    _write(FencedDatabase(db, a.fence), "x")


def test_ha_config_section():
    cfg = Config.model_validate({"targets": [], "ha": {"lease": "3s"}})
    assert cfg.ha is not None and cfg.ha.lease_ms == 3000 and cfg.ha.name == "sentinel"
    assert Config.model_validate({"targets": []}).ha is None
    with pytest.raises(ValueError, match="at least 1s"):
        Config.model_validate({"targets": [], "ha": {"lease": "500ms"}})


def test_targets_discovered_while_standing_by_reach_the_new_remediation_engine(tmp_path):
    from prometheus_client import CollectorRegistry

    from sentinel.config import TargetConfig
    from sentinel.daemon.remediation import DaemonRemediation

    cfg = Config.model_validate({
        "targets": [{"name": "static", "url": "http://s"}],
        "remediation": {"command_allowlist": ["/bin/true"], "policies": [
            {"name": "fix", "alerts": ["X"], "steps": [{"command": {"argv": ["/bin/true"]}}]}]}})
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    db.upgrade()
    pod = TargetConfig.model_validate({"name": "pod-a", "url": "http://10.0.0.1:8000",
                                       "labels": {"pod": "pod-a"}, "scrape_interval": "5s",
                                       "scrape_timeout": "4s"})
    remediation = DaemonRemediation(cfg, CollectorRegistry(), pager=None,  # type: ignore[arg-type]
                                    may_act=lambda: True)
    for _ in range(2):  # every term's engine learns them
        remediator = remediation.start(db, [pod])
        try:
            engine = remediator.engine
            assert set(engine.targets) == {"static", "pod-a"}
            assert engine.targets["pod-a"].labels == {"pod": "pod-a"}
            assert remediation.approvals is not None
        finally:
            remediation.stop(1.0)
        assert remediation.remediator is None and remediation.approvals is None


def test_work_pinned_to_a_term_is_refused_in_the_next_even_by_the_same_daemon(pg):
    a = _lease(pg, "a")
    a._round()
    fenced = FencedDatabase(pg, a.fence)
    with a.term() as epoch:
        assert epoch == 1
        _write(fenced, "term1")
        # Demoted and elected again while this work was held up.
        a.stop()
        a._stop.clear()
        a._round()
        assert a.epoch == 2
        with pytest.raises(NotLeader, match="epoch 1 refused in epoch 2"):
            _write(fenced, "stale")
    _write(fenced, "term2")  # unpinned work of the new term goes through


def test_a_term_lost_and_retaken_between_rounds_is_a_fresh_takeover(pg):
    calls: list[str] = []
    a = _lease(pg, "a", on_elected=lambda e: calls.append(f"elected {e}"),
               on_demoted=lambda: calls.append("demoted"))
    a._round()
    a.stop()  # the lease moves on (here: handed back) without the lease thread noticing
    a._stop.clear()
    a._round()  # retaken in the same round: epoch 2
    assert calls == ["elected 1", "demoted", "elected 2"]
