"""The notify worker's dispatch in bounded chunks (issue 49).

A storm's intents were taken in one at a time (a group SELECT, an autoflush and
act-first lookups per intent) in one transaction that held SQLite's one writer
for minutes. Now a run reads the groups its intents touch in one query, the
message annotations once per chunk, and takes at most `Dispatcher.chunk` intents
per transaction. These tests say that this changes nothing people are told, that
the reads do not grow with the intents, and that an evaluation commits between
two chunks of a big dispatch.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from notify_helpers import LoopbackReceiver
from sqlalchemy import event, func, select
from test_notify_delivery import T0, alert

from sentinel.config import load_config
from sentinel.config.notify import InhibitRuleConfig, RouteConfig, default_inhibit_rules
from sentinel.daemon.heartbeat import Heartbeats
from sentinel.daemon.notifier import WORKER, Notifier
from sentinel.daemon.selfmetrics import SelfMetrics
from sentinel.incidents import Database, IncidentTracker
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.models import Incident, TimelineEvent, TimelineKind
from sentinel.incidents.models_notify import NotifyGroup, NotifyIntent, OutboxMessage
from sentinel.model import AlertState, Labels, Notification, NotificationKind, labels_of
from sentinel.respond.notify import actfirst
from sentinel.respond.notify.dispatcher import Dispatcher, DispatchSettings
from sentinel.respond.notify.mute import InhibitionSources, InhibitRule, inhibited_by
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.routing import build_route

S = 1000
TARGETS = ("a", "b", "c", "d")
NAMES = ("KVCacheHigh", "VLLMDown")
# Two receivers: `chat` groups by alert name (many alerts in one group: the chunk edge
# falls inside a group), `oncall` pages the critical ones per target.
ROUTE = RouteConfig.model_validate({
    "receiver": "chat", "group_by": ["alertname"], "group_wait": "0s",
    "group_interval": "30s",
    "routes": [{"receiver": "oncall", "matchers": ["severity=critical"],
                "group_by": ["target"], "group_wait": "10s", "group_interval": "0s",
                "continue": True}]})

# A down server's KV-cache alert says nothing new (notes on the timeline: who was not told).
INHIBIT = InhibitRule.from_config(InhibitRuleConfig.model_validate({
    "source_matchers": ["alertname=VLLMDown"], "target_matchers": ["alertname=KVCacheHigh"],
    "equal": ["target"]}))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A migrated SQLite file with one open incident per target and alert name (no
    intents): each example copies it instead of migrating its own."""
    path = tmp_path_factory.mktemp("chunks") / "template.db"
    db = Database(f"sqlite:///{path}")
    db.upgrade()
    IncidentTracker(db).process([alert(t, n) for t in TARGETS for n in NAMES], T0)
    db.dispose()
    yield path


def _ids(db: Database) -> dict[tuple[str, str], int]:
    with db.session() as s:
        return {(t, n): i for i, t, n in s.execute(
            select(Incident.id, Incident.target, Incident.alertname))}


def _state(db: Database) -> dict[str, Any]:
    """Everything the dispatch decides: intents marked, groups, messages, timeline notes."""
    with db.session() as s:
        return {
            "intents": list(s.execute(select(NotifyIntent.id, NotifyIntent.dispatched_at)
                                      .order_by(NotifyIntent.id))),
            "groups": sorted((g.key, g.alerts, g.sent_firing, g.sent_resolved, g.seq,
                              g.created_at, g.next_flush_at, g.last_sent_at)
                             for g in s.scalars(select(NotifyGroup))),
            "outbox": list(s.execute(select(
                OutboxMessage.receiver, OutboxMessage.group_key, OutboxMessage.idempotency_key,
                OutboxMessage.kind, OutboxMessage.notification, OutboxMessage.incident_ids)
                .order_by(OutboxMessage.id))),
            "notes": list(s.execute(select(TimelineEvent.incident_id, TimelineEvent.message)
                                    .where(TimelineEvent.kind == TimelineKind.NOTE)
                                    .order_by(TimelineEvent.id))),
        }


# One step: an alert changes (target, name, firing, critical) some seconds after the
# last, or the notify worker runs.
steps = st.lists(st.one_of(
    st.tuples(st.sampled_from(TARGETS), st.sampled_from(NAMES), st.booleans(), st.booleans(),
              st.integers(0, 20)),
    st.just("run")), min_size=1, max_size=30)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, chunk=st.integers(1, 7))
def test_the_batched_intake_tells_exactly_what_one_intent_at_a_time_told(
        template: Path, tmp_path_factory: pytest.TempPathFactory, steps: list[Any],
        chunk: int) -> None:
    # The same intents and runs on two copies of one database: dispatched one intent per
    # transaction (each intent's groups read for it alone: the old intake's reads), and in
    # chunks of `chunk` or all at once. Groups, messages (their order, bodies, annotations
    # and idempotency keys), intent marks and timeline notes are the same. (Checked once
    # against the dispatcher before chunking, in two processes: 200 random sequences,
    # with an inhibition rule, and with excerpts, model runbooks and act-first reasons
    # on the pages: the same state.)
    tmp = tmp_path_factory.mktemp("eq")
    outcomes = []
    for size in (1, chunk, 10_000):
        path = tmp / f"{size}.db"
        shutil.copy(template, path)
        db = Database(f"sqlite:///{path}")
        ids = _ids(db)
        outbox = Outbox()
        dispatcher = Dispatcher(db, outbox, DispatchSettings(
            build_route(ROUTE, ["chat", "oncall"]), (INHIBIT,), watchdog=True,
            annotations=actfirst.with_act_first(None)))
        dispatcher.chunk = size
        now = T0
        for step in [*steps, "run"]:
            if step == "run":
                runs = 0
                while dispatcher.run(now).more:
                    runs += 1
                    assert runs < 100, "a run that never ends"
                continue
            target, name, firing, critical, dt = step
            now += dt * S
            a = alert(target, name, at=T0, severity="critical" if critical else "page")
            if not firing:
                a = replace(a, state=AlertState.INACTIVE, resolved_at_ms=now, last_eval_ms=now)
            with db.session() as s:
                outbox.enqueue(s, Notification(ids[(target, name)], NotificationKind.FIRING,
                                               (a,)), now)
        outcomes.append(_state(db))
        db.dispose()
    assert outcomes[1] == outcomes[0]
    assert outcomes[2] == outcomes[0]


def _selects(db: Database) -> list[str]:
    seen: list[str] = []

    def on(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", on)
    return seen


def _storm(db: Database, n: int, at: int = T0) -> Outbox:
    """`n` targets' incidents opened in one evaluation: n intents waiting."""
    outbox = Outbox()
    IncidentTracker(db, outbox=outbox).process([alert(f"t{i}", at=at) for i in range(n)], at)
    return outbox


@pytest.mark.parametrize("n", [10, 120])
def test_a_run_reads_a_constant_number_of_times_whatever_its_intents(
        incident_db: Database, n: int) -> None:
    # Each of n intents makes its own group and message (the implicit route: one group
    # per target, sent at once), with the act-first annotations; the reads are the same
    # handful at 10 and at 120 intents (one intent at a time it was ~6 per intent).
    db = incident_db
    outbox = _storm(db, n)
    dispatcher = Dispatcher(db, outbox, DispatchSettings(
        build_route(None, ["oncall"]), annotations=actfirst.with_act_first(None)))
    selects = _selects(db)
    stats = dispatcher.run(T0 + S)
    assert (stats.intents, stats.messages, stats.more) == (n, n, False)
    # intents, groups, incidents (joined?), silences, the due groups, timeline rows and
    # holds for the annotations: 7 whatever n is.
    assert len(selects) <= 8, selects
    with db.session() as s:
        bodies = [m.notification for m in s.scalars(select(OutboxMessage))]
    assert len(bodies) == n and all(b["alerts"] for b in bodies)
    # The worker's act-first round after it (every round): n pages out, none owes a
    # runbook update; read in a few queries, not a scan of every group per incident.
    selects.clear()
    with db.session() as s:
        assert actfirst.updates(s, lambda s, i: {}, ms_to_dt(T0 + 2 * S)) == []
    assert len(selects) <= 3, selects


def test_an_evaluation_commits_between_two_chunks_of_a_big_dispatch(
        tmp_path: Path, loopback: LoopbackReceiver) -> None:
    # 300 intents in chunks of 40 (SQLite: one writer). After the worker's first chunk,
    # an evaluation on another thread opens a new incident; the dispatch goes on only
    # once that evaluation committed, so the test deadlocks (and fails at the wait)
    # if a dispatch held the writer past its chunk.
    (tmp_path / "sentinel.yaml").write_text(
        f"database: sqlite:///{tmp_path / 'sentinel.db'}\n"
        "notify: {interval: 1h}\n"
        f"receivers:\n  - name: oncall\n    webhook: {{url: '{loopback.url('/hook')}'}}\n")
    config = load_config(tmp_path / "sentinel.yaml")
    db = Database(config.database)
    db.upgrade()
    beats = Heartbeats()
    beats.expect(WORKER, 60, 0.0)
    notifier = Notifier(config, db, SelfMetrics(), lambda: T0 + S, heartbeats=beats)
    notifier.dispatcher.chunk = 40
    tracker = IncidentTracker(db, outbox=notifier.outbox)
    tracker.process([alert(f"t{i}") for i in range(300)], T0)
    committed = threading.Event()
    left_when_committed: list[int] = []
    runs: list[int] = []
    beaten: list[int] = []  # the worker's heartbeat count before each chunk
    real_run = notifier.dispatcher.run

    def evaluation() -> None:
        tracker.process([alert("late")], T0 + S)  # needs the writer
        with db.session() as s:
            left_when_committed.append(s.scalar(select(func.count()).select_from(
                NotifyIntent).where(NotifyIntent.dispatched_at.is_(None))) or 0)
        committed.set()

    def run(now_ms: int) -> Any:
        beaten.append(next(b.runs for b in beats.beats() if b.worker == WORKER))
        stats = real_run(now_ms)
        runs.append(stats.intents)
        if len(runs) == 1:
            threading.Thread(target=evaluation, daemon=True).start()
            assert committed.wait(60), "the evaluation waited behind the dispatch"
        return stats

    notifier.dispatcher.run = run  # type: ignore[method-assign]
    try:
        notifier.run_once()
    finally:
        db.dispose()
    # It committed while 260 of the storm's intents (and its own) still waited...
    assert left_when_committed == [261]
    # ...then the worker went on, chunk by chunk, and told every incident once.
    assert runs[:8] == [40] * 7 + [21] and sum(runs) == 301
    assert len(loopback.accepted()) == 301
    # It beat between every two chunks: the watchdog sees a long dispatch progress.
    assert beaten == list(range(beaten[0], beaten[0] + len(runs)))


label_sets = st.fixed_dictionaries({
    "alertname": st.sampled_from(["VLLMTargetDown", "VLLMRequestsQueued", "KVCacheHigh"]),
    "target": st.sampled_from(["a", "b", "c"]),
    "severity": st.sampled_from(["warning", "critical"])}).map(labels_of)
RULES = (*(InhibitRule.from_config(r) for r in default_inhibit_rules()), INHIBIT,
         InhibitRule.from_config(InhibitRuleConfig.model_validate({  # no equal labels
             "source_matchers": ["severity=critical"], "target_matchers": ["severity=warning"]})),
         InhibitRule.from_config(InhibitRuleConfig.model_validate({  # an alert is both: never
             "source_matchers": ["alertname=VLLMRequestsQueued"],  # inhibits itself
             "target_matchers": ["target=~a|b"], "equal": ["target"]})))


@settings(max_examples=300, deadline=None)
@given(sources=st.lists(st.tuples(label_sets, st.integers(1, 4)), max_size=12),
       labels=label_sets, incident=st.integers(1, 4), rules=st.sets(st.sampled_from(RULES)))
def test_the_indexed_sources_inhibit_as_the_whole_list_did(
        sources: list[tuple[Labels, int]], labels: Labels, incident: int,
        rules: set[InhibitRule]) -> None:
    # A storm's flush looks each alert up among the sources sharing its `equal` values
    # (InhibitionSources) instead of scanning every firing alert: the same first source,
    # for the other incidents' sources and for the alert's own incident's.
    ordered = sorted(rules, key=RULES.index)
    index = InhibitionSources(ordered, sources)
    for keep in (lambda i: i != incident, lambda i: i == incident):
        assert index.inhibited_by(labels, keep) == inhibited_by(
            labels, ordered, [lb for lb, i in sources if keep(i)])
