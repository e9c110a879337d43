"""Act first across a takeover: the new leader settles a hold the old one could not.

Two lease holders on one real PostgreSQL, each with its own fenced database and
notify worker, as two HA daemons have. The old leader's remediation ran and its
outcome is on record (the attempt row), but its release of the held page is
refused by the fence (its lease is gone). The new leader's first act-first round
must settle the hold from the outcome on record, once: a failed or unverified
action pages at once with why, a verified fix pages nobody and tells chat once.
Time is passed in (the grace is a minute; every round here runs a second in).
"""

from __future__ import annotations

from typing import Any

import pytest
from fixtures_e2e import wait_for
from notify_helpers import LoopbackReceiver, loopback  # noqa: F401
from sqlalchemy import func, select

from sentinel.config import parse_config
from sentinel.daemon.leader import FencedDatabase, LeaderLease, NotLeader
from sentinel.daemon.notifier import Notifier
from sentinel.daemon.selfmetrics import SelfMetrics
from sentinel.incidents import Database, get_incident
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.models_notify import HoldStatus, NotifyHold, OutboxMessage
from sentinel.incidents.models_remediation import AttemptStatus, RemediationAttempt
from sentinel.incidents.tracker import IncidentTracker
from sentinel.model import Alert, AlertState, labels_of
from sentinel.respond.notify import actfirst

T0 = 1_795_255_205_000
S = 1000
GRACE = 60 * S
LEASE_MS = 6000


@pytest.fixture
def pg(fresh_postgres_url: str):
    db = Database(fresh_postgres_url)
    db.upgrade()
    yield db
    db.dispose()


def crash() -> Alert:
    return Alert(group="vllm", rule="VLLMHBMOutOfMemory",
                 labels=labels_of({"alertname": "VLLMHBMOutOfMemory", "target": "tpu-a",
                                   "severity": "critical"}),
                 annotations=labels_of({"summary": "HBM OOM on tpu-a"}),
                 state=AlertState.FIRING, value=1.0, active_at_ms=T0, last_eval_ms=T0,
                 fired_at_ms=T0)


def _config(lb: LoopbackReceiver) -> Any:
    return parse_config({
        "receivers": [{"name": "oncall", "webhook": {"url": lb.url("/page")}},
                      {"name": "chat", "webhook": {"url": lb.url("/chat")}}],
        "notify": {"route": {"receiver": "oncall", "group_wait": "0s"},
                   "act_first": {"receiver": "chat"}}})


def _take_over(b: LeaderLease, timeout_rounds: int = 600) -> None:
    """Run b's rounds until it leads (the database clock ends a's lease)."""
    import time

    for _ in range(timeout_rounds):
        b._round()
        if b.is_leader():
            return
        time.sleep(0.05)  # poll interval, not a wait for an event
    raise AssertionError("b did not take the lease")


def _hold_then_take_over(pg: Database, lb: LoopbackReceiver, status: AttemptStatus,
                         detail: str, data: dict[str, Any]
                         ) -> tuple[Notifier, Notifier, int]:
    """a holds the page, acts and records the outcome; b takes the lease before a releases."""
    # 6 s leases: the fence ends a transaction idle for a third of a lease, and 333 ms
    # (a 1 s lease) ran out inside the tracker's transaction beside six test workers.
    a = LeaderLease(pg, LEASE_MS, "test", "a")
    b = LeaderLease(pg, LEASE_MS, "test", "b")
    a._round()
    assert a.is_leader()
    old_db = FencedDatabase(pg, a.fence)
    old = Notifier(_config(lb), old_db, SelfMetrics(), lambda: T0)
    tracker = IncidentTracker(old_db, outbox=old.outbox,
                              act_first=lambda _: (GRACE, "policy restart acts"))
    (n,) = tracker.process([crash()], T0)
    with old_db.session() as s:  # the attempt as state.claim and state.finish leave it
        s.add(RemediationAttempt(
            incident_id=n.incident_id, target="tpu-a", policy="restart", step=0,
            action="command", manual=False, status=status, requested_at=ms_to_dt(T0),
            acted_at=ms_to_dt(T0 + 100), finished_at=(
                None if status is AttemptStatus.RUNNING else ms_to_dt(T0 + 200)),
            recovery_ms=data.get("recovery_ms"), detail=detail, data=data,
            owner="other-host:1:1", lease_until=None))
    _take_over(b)
    new = Notifier(_config(lb), FencedDatabase(pg, b.fence), SelfMetrics(), lambda: T0 + S)
    return old, new, n.incident_id


def _hold(pg: Database, incident_id: int) -> str:
    with pg.session() as s:
        row = s.get(NotifyHold, incident_id)
        assert row is not None
        return row.status


def _outbox_count(pg: Database, receiver: str) -> int:
    with pg.session() as s:
        return int(s.scalar(select(func.count()).select_from(OutboxMessage).where(
            OutboxMessage.receiver == receiver)) or 0)


def test_a_failed_action_the_old_leader_could_not_release_pages_at_the_new_leaders_first_round(
        pg: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    old, new, incident = _hold_then_take_over(
        pg, loopback, AttemptStatus.FAILED, "exit status 1", {"exit": 1})
    with pytest.raises(NotLeader):  # the old leader's release, refused by the fence
        old.not_fixed(incident, T0 + 300, "command did not hold: exit status 1")
    assert _hold(pg, incident) == HoldStatus.WAITING
    new.run_once()  # a second in: well inside the minute's grace
    assert _hold(pg, incident) == HoldStatus.PAGED
    (page,) = [r.json() for r in loopback.accepted("/page")]
    assert page["status"] == "firing"  # type: ignore[index]
    assert "exit status 1" in page["alerts"][0]["annotations"][  # type: ignore[index]
        actfirst.REMEDIATION]
    new.run_once()
    new.run_once()
    assert len(loopback.accepted("/page")) == 1  # once
    assert _outbox_count(pg, "oncall") == 1
    assert loopback.accepted("/chat") == []


def test_a_verified_fix_the_old_leader_could_not_record_pages_nobody_and_tells_chat_once(
        pg: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    data = {"recovered": "verified: healthy after 1s, serving after 1s", "recovery_ms": 900,
            "verify": "ok", "served_after_s": 1.0}
    old, new, incident = _hold_then_take_over(pg, loopback, AttemptStatus.SUCCEEDED, "ok", data)
    with pytest.raises(NotLeader):
        old.recovered(incident, T0 + 300, "command on tpu-a verified", {"attempt": 1})
    new.run_once()
    new.run_once()
    assert _hold(pg, incident) == HoldStatus.FIXED
    assert loopback.accepted("/page") == []  # nobody paged
    assert _outbox_count(pg, "oncall") == 0
    (told,) = [r.json() for r in loopback.accepted("/chat")]
    assert told["alerts"][0]["annotations"]["sentinel_outcome"] == "fixed"  # type: ignore[index]
    assert get_incident(pg, incident).incident.status == "resolved"


def test_an_action_still_running_keeps_the_page_held(
        pg: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    _, new, incident = _hold_then_take_over(pg, loopback, AttemptStatus.RUNNING, "", {})
    new.run_once()
    assert _hold(pg, incident) == HoldStatus.WAITING
    assert loopback.accepted() == []


def test_an_outcome_this_daemon_is_still_telling_is_left_to_its_engine(
        pg: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    """Between recording the outcome and deciding the hold the engine's run is not over
    (lease.RUNNING): the round leaves it the hold, then decides it once it is over."""
    from sentinel.respond.remediate.lease import RUNNING

    _, new, incident = _hold_then_take_over(pg, loopback, AttemptStatus.FAILED, "exit 1", {})
    with pg.session() as s:
        attempt_id = s.scalar(select(RemediationAttempt.id))
    assert attempt_id is not None
    RUNNING.add(attempt_id)
    try:
        new.run_once()
        assert _hold(pg, incident) == HoldStatus.WAITING
    finally:
        RUNNING.discard(attempt_id)
    new.run_once()
    assert _hold(pg, incident) == HoldStatus.PAGED
    assert len(loopback.accepted("/page")) == 1


def test_two_deciders_at_once_decide_a_hold_once(pg: Database) -> None:
    """The engine's thread and the round (or two daemons) releasing together: the
    second waits on the row, then finds it decided; one note, one reason on the page."""
    import threading

    from sqlalchemy import text

    from sentinel.respond.notify.outbox import Outbox

    tracker = IncidentTracker(pg, outbox=Outbox(),
                              act_first=lambda _: (GRACE, "policy restart acts"))
    (n,) = tracker.process([crash()], T0)
    assert _hold(pg, n.incident_id) == HoldStatus.WAITING
    inside, go = threading.Event(), threading.Event()
    results: dict[str, bool] = {}

    def decide(name: str, hold_open: bool) -> None:
        with pg.session() as s:
            results[name] = actfirst.release(s, n.incident_id, ms_to_dt(T0 + S), name)
            if hold_open:
                inside.set()
                go.wait(60)

    first = threading.Thread(target=decide, args=("first", True))
    first.start()
    assert inside.wait(60)
    second = threading.Thread(target=decide, args=("second", False))
    second.start()
    def waiting_on_a_lock() -> bool:
        # A transaction of its own each time: pg_stat_activity is a snapshot taken at a
        # transaction's first read and kept to its end, so polls in one transaction that
        # began before the second decider blocked never saw it block (beside stress-ng).
        with pg.session() as s:
            return bool(s.scalar(text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")))

    # The event: the second decider waits on the row (or, unlocked, decides at once).
    wait_for(lambda: not second.is_alive() or waiting_on_a_lock(), 60,
             "the second decider to wait on the row or end")
    go.set()
    first.join(60)
    second.join(60)
    assert results == {"first": True, "second": False}
    notes = [e.message for e in get_incident(pg, n.incident_id).timeline
             if e.message.startswith("paging now")]
    assert notes == ["paging now: first"]
    with pg.session() as s:
        row = s.get(NotifyHold, n.incident_id)
        assert row is not None and row.reason == "first"
