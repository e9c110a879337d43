"""Issue 49: the persisted alert state is written as a delta, proportional to what changed.

An evaluation writes the rows of alerts that appeared, went or changed what a
restore needs, and one "evaluated at" row per group (Prometheus's `downAt`);
a restart reads the same state back as the whole-table rewrite did.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings
from sqlalchemy import event, func, select

from sentinel.incidents import Database, IncidentTracker
from sentinel.incidents.alert_states import AlertStateJournal, load
from sentinel.incidents.models import AlertGroupEvalRow, AlertStateRow
from sentinel.model import Alert, AlertState
from sentinel.rules.restore import RestoreSettings, restore_for_state

T0 = 1_700_000_000_000
S = 1000


def pending(target: str, at: int, group: str = "g", value: float = 1.0) -> Alert:
    """A pending alert of rule Hot on `target`."""
    return Alert(group=group, rule="Hot", labels=(("alertname", "Hot"), ("target", target)),
                 annotations=(("summary", f"{value}"),), state=AlertState.PENDING,
                 value=value, active_at_ms=at, last_eval_ms=at)


@contextmanager
def writes(db: Database) -> Iterator[list[str]]:
    """The INSERT/UPDATE/DELETE statements on alert_states run inside the block."""
    seen: list[str] = []

    def record(_c: object, _cur: object, statement: str, *_a: object) -> None:
        text = statement.lstrip().upper()
        if "ALERT_STATES" in text and text.split()[0] in ("INSERT", "UPDATE", "DELETE"):
            seen.append(text.split()[0])

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(db.engine, "before_cursor_execute", record)


def evaluate(tracker: IncidentTracker, journal: AlertStateJournal, group: str,
             active: list[Alert], now: int) -> None:
    """One group's evaluation as the pipeline records it."""
    delta = journal.delta(group, active, now)
    tracker.process([a for a in active if a.state is AlertState.FIRING], now, states=delta)
    journal.committed(delta)


def test_an_evaluation_that_changes_nothing_writes_no_alert_row(incident_db: Database) -> None:
    tracker, journal = IncidentTracker(incident_db), AlertStateJournal()
    fleet = [pending(f"t{i}", T0) for i in range(50)]
    evaluate(tracker, journal, "g", fleet, T0)  # first evaluation: the group whole
    # The next ones: values move (value and annotations are not what a restore needs).
    moved = [replace(a, value=2.0, annotations=(("summary", "2.0"),),
                     last_eval_ms=T0 + 10 * S) for a in fleet]
    with writes(incident_db) as seen:
        evaluate(tracker, journal, "g", moved, T0 + 10 * S)
    assert seen == []  # only the group's "evaluated at" row moved
    with incident_db.session() as s:
        assert s.scalar(select(func.count()).select_from(AlertStateRow)) == 50
        at = s.scalar(select(AlertGroupEvalRow.evaluated_at))
    loaded = load(incident_db)
    assert {a.last_eval_ms for a in loaded} == {T0 + 10 * S}  # the group's downAt
    assert at is not None


def test_one_change_writes_one_row(incident_db: Database) -> None:
    tracker, journal = IncidentTracker(incident_db), AlertStateJournal()
    fleet = [pending(f"t{i}", T0) for i in range(20)]
    evaluate(tracker, journal, "g", fleet, T0)
    now = T0 + 60 * S
    fired = replace(fleet[3], state=AlertState.FIRING, fired_at_ms=now, last_eval_ms=now)
    gone, new = fleet[4], pending("new", now)
    after = [fired if a is fleet[3] else a for a in fleet if a is not gone] + [new]
    with writes(incident_db) as seen:
        evaluate(tracker, journal, "g", after, now)
    assert sorted(seen) == ["DELETE", "INSERT", "UPDATE"]  # one statement each
    loaded = {a.labels: a for a in load(incident_db)}
    assert loaded[fired.labels].state is AlertState.FIRING
    assert loaded[fired.labels].fired_at_ms == now
    assert gone.labels not in loaded and new.labels in loaded
    assert len(loaded) == 20


def test_groups_are_separate_and_a_forgotten_group_is_written_whole(
        incident_db: Database) -> None:
    tracker, journal = IncidentTracker(incident_db), AlertStateJournal()
    evaluate(tracker, journal, "a", [pending("x", T0, "a")], T0)
    evaluate(tracker, journal, "b", [pending("y", T0, "b"), pending("z", T0, "b")], T0)
    # A second journal (a restart, a takeover) knows nothing: its first write of a
    # group replaces that group's rows, never duplicates them.
    other = AlertStateJournal()
    evaluate(tracker, other, "b", [pending("y", T0, "b")], T0 + S)
    loaded = load(incident_db)
    assert sorted((a.group, a.labels[1][1]) for a in loaded) == [("a", "x"), ("b", "y")]
    by_group = {a.group: a.last_eval_ms for a in loaded}
    assert by_group == {"a": T0, "b": T0 + S}


def test_restart_restores_for_from_the_groups_evaluation_time(incident_db: Database) -> None:
    # Prometheus's downAt is the last evaluation, not the last time the row changed.
    tracker, journal = IncidentTracker(incident_db), AlertStateJournal()
    a = pending("t", T0)
    evaluate(tracker, journal, "g", [a], T0)
    for i in range(1, 20):  # 19 more evaluations, each writing no alert row
        evaluate(tracker, journal, "g", [replace(a, last_eval_ms=T0 + i * 30 * S)],
                 T0 + i * 30 * S)
    down_at = T0 + 19 * 30 * S
    [saved] = load(incident_db)
    assert saved.last_eval_ms == down_at and saved.active_at_ms == T0
    now = down_at + 5 * 60 * S  # five minutes down
    restored = restore_for_state(saved, 60 * 60 * S, now, RestoreSettings())
    assert restored is not None
    assert restored.active_at_ms == T0 + (now - down_at)  # the outage does not count


def test_a_failed_commit_makes_the_next_write_whole(incident_db: Database) -> None:
    tracker, journal = IncidentTracker(incident_db), AlertStateJournal()
    fleet = [pending("a", T0), pending("b", T0)]
    evaluate(tracker, journal, "g", fleet, T0)
    delta = journal.delta("g", fleet[:1], T0 + S)
    journal.forget("g")  # what the pipeline does when process raised: unknown outcome
    tracker.process([], T0 + S, states=delta)  # it did commit after all
    evaluate(tracker, journal, "g", fleet[:1], T0 + 2 * S)
    assert [a.labels for a in load(incident_db)] == [fleet[0].labels]


def test_a_whole_replace_still_replaces_everything(incident_db: Database) -> None:
    tracker, journal = IncidentTracker(incident_db), AlertStateJournal()
    evaluate(tracker, journal, "g", [pending("a", T0)], T0)
    tracker.save_alert_states([pending("b", T0 + S, "h")])
    assert [(a.group, a.last_eval_ms) for a in load(incident_db)] == [("h", T0 + S)]


# -- the invariant, over random evaluations --------------------------------------------

_TARGETS = [f"t{i}" for i in range(6)]
_STEP = st.tuples(
    st.sampled_from(["a", "b"]),
    st.dictionaries(st.sampled_from(_TARGETS),
                    st.tuples(st.sampled_from([AlertState.PENDING, AlertState.FIRING]),
                              st.integers(0, 3), st.floats(allow_nan=False))),
    st.booleans(),  # whether the commit "fails" (the journal forgets, the write happened)
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_STEP, min_size=1, max_size=12))
def test_the_table_always_holds_each_groups_last_evaluation(
        incident_db: Database, steps: list[tuple[str, dict, bool]]) -> None:
    """Whatever the order of groups, changes and failed commits, loading gives each
    group's alerts of its last evaluation, with what a restore needs unchanged."""
    tracker = IncidentTracker(incident_db)
    tracker.save_alert_states([])
    journal = AlertStateJournal()
    want: dict[str, dict[tuple, Alert]] = {}
    for n, (group, spec, lost) in enumerate(steps):
        now = T0 + n * S
        active = []
        for target, (state, active_at, value) in sorted(spec.items()):
            a = replace(pending(target, T0 + active_at * S, group, value), last_eval_ms=now)
            if state is AlertState.FIRING:
                a = replace(a, state=state, fired_at_ms=T0 + (active_at + 1) * S)
            active.append(a)
        delta = journal.delta(group, active, now)
        tracker.process([], now, states=delta)
        if lost:
            journal.forget(group)
        else:
            journal.committed(delta)
        want[group] = {(a.rule, a.labels): a for a in active}
    got = {(a.group, a.rule, a.labels): a for a in load(incident_db)}
    expected = {(g, *k): a for g, alerts in want.items() for k, a in alerts.items()}
    assert got.keys() == expected.keys()
    for k, a in expected.items():
        b = got[k]
        assert (b.state, b.active_at_ms, b.fired_at_ms, b.last_eval_ms) == (
            a.state, a.active_at_ms, a.fired_at_ms, a.last_eval_ms)


def test_rows_of_groups_no_longer_loaded_are_forgotten(incident_db: Database) -> None:
    from sentinel.incidents.alert_states import forget_groups

    tracker, journal = IncidentTracker(incident_db), AlertStateJournal()
    evaluate(tracker, journal, "kept", [pending("x", T0, "kept")], T0)
    evaluate(tracker, journal, "gone", [pending("y", T0, "gone")], T0)
    assert forget_groups(incident_db, ["kept"]) == 1
    assert [a.group for a in load(incident_db)] == ["kept"]
    with incident_db.session() as s:
        assert s.scalars(select(AlertGroupEvalRow.group_name)).all() == ["kept"]
