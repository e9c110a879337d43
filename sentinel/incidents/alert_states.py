"""Persisted rule-engine alerts: what `RuleManager.restore` gets back after a restart.

What is written per evaluation is proportional to what changed, never to the
fleet (issue 49: with an alert pending on each of 5,000 targets, deleting and
re-inserting every row at every evaluation was a quarter of the daemon's
time). An evaluation of one rule group writes an `AlertStateDelta`:

- the rows of alerts that appeared (inserted), that went (deleted), and that
  changed what a restore needs: state, `ActiveAt`, `FiredAt`, keep-firing
  start or labels (updated). Value and annotations are written with those
  rows, not on their own: a restored alert takes both from its next
  evaluation, so a value that moves every evaluation costs no write;
- one `alert_group_evals` row per group, moved to the evaluation time: the
  `downAt` Prometheus reads to restore `for` (rules/restore.py). A loaded
  alert's `last_eval` is its group's, or its row's own when that is later
  (rows from before the group row existed).

`AlertStateJournal` remembers, per group, what this process last committed,
and derives the delta. A group it does not know (the first evaluation after
a start, a takeover, or a failed commit) is written whole: its rows are
deleted and the active ones inserted, so a delta never applies to rows
another process or another leader wrote. The delta is written in the
transaction that records the same evaluation's incidents, so a crash never
leaves the rule state and the incidents telling different stories (issue 10).

`save`/`save_in` with a plain sequence still replace the whole table (tools
and tests). Values round-trip exactly (NaN is stored as NULL); labels come
back sorted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import Table, bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from sentinel.incidents.convert import (
    dt_to_ms,
    labels_from_json,
    labels_to_json,
    ms_to_dt,
    opt_dt_to_ms,
    opt_ms_to_dt,
    value_from_db,
    value_to_db,
)
from sentinel.incidents.db import Database
from sentinel.incidents.models import AlertGroupEvalRow, AlertStateRow
from sentinel.model import Alert, AlertState, Labels, fingerprint

# An alert in a group: its rule and labels (the fingerprint is their hash; computing
# it for every alert at every evaluation would cost more than the comparison).
Key = tuple[str, Labels]
# What a restore needs of an alert; a row is rewritten only when this changes.
Signature = tuple[str, int, int | None, int | None]

# The Core tables: executemany of a statement with bound WHERE values (the ORM's bulk
# update by primary key does not take a WHERE clause).
_STATES: Table = AlertStateRow.__table__  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class AlertStateDelta:
    """One group evaluation's changes to the persisted alert state.

    `whole` means the group's rows are replaced by `added` (the group was not
    known to the journal); otherwise `added` are inserted, `changed` updated
    and `removed` deleted.
    """

    group: str
    evaluated_ms: int
    added: tuple[Alert, ...] = ()
    changed: tuple[Alert, ...] = ()
    removed: tuple[Key, ...] = ()
    whole: bool = False

    @property
    def writes(self) -> int:
        """Alert rows this delta inserts, updates or deletes (the group row aside)."""
        return len(self.added) + len(self.changed) + len(self.removed)


def _signature(a: Alert) -> Signature:
    return (str(a.state), a.active_at_ms, a.fired_at_ms, a.keep_firing_since_ms)


class AlertStateJournal:
    """What this process last committed to `alert_states`, per group.

    Not thread-safe by itself: the pipeline calls it under its record lock.
    """

    def __init__(self) -> None:
        self._groups: dict[str, dict[Key, Signature]] = {}

    def delta(self, group: str, active: Iterable[Alert], now_ms: int) -> AlertStateDelta:
        """The delta from the committed state of `group` to its `active` alerts."""
        current = {(a.rule, a.labels): a for a in active
                   if a.state in (AlertState.PENDING, AlertState.FIRING)}
        known = self._groups.get(group)
        if known is None:
            return AlertStateDelta(group, now_ms, tuple(current.values()), whole=True)
        added = tuple(a for k, a in current.items() if k not in known)
        changed = tuple(a for k, a in current.items()
                        if k in known and known[k] != _signature(a))
        removed = tuple(k for k in known if k not in current)
        return AlertStateDelta(group, now_ms, added, changed, removed)

    def committed(self, delta: AlertStateDelta) -> None:
        """The delta's transaction committed: it is now what the database holds."""
        if delta.whole:
            self._groups[delta.group] = {}
        known = self._groups.setdefault(delta.group, {})
        for a in (*delta.added, *delta.changed):
            known[(a.rule, a.labels)] = _signature(a)
        for key in delta.removed:
            known.pop(key, None)

    def forget(self, group: str | None = None) -> None:
        """Not sure what the database holds for `group` (or any): write it whole next time."""
        if group is None:
            self._groups.clear()
        else:
            self._groups.pop(group, None)


def save(db: Database, alerts: Sequence[Alert]) -> None:
    """Replace the persisted set with `alerts`."""
    with db.session() as s:
        save_in(s, alerts)


def save_in(s: Session, states: Sequence[Alert] | AlertStateDelta) -> None:
    """Write `states` in the caller's transaction: a delta, or a whole new set.

    The incident stage calls this in the transaction that records the same
    evaluation's transitions, so a crash can never leave the rule state and
    the incidents telling different stories (issue 10).
    """
    if isinstance(states, AlertStateDelta):
        _apply(s, states)
        return
    s.execute(delete(AlertStateRow))
    s.execute(delete(AlertGroupEvalRow))
    rows = [_row(a, a.last_eval_ms) for a in states]
    if rows:
        s.execute(insert(AlertStateRow), rows)


def _apply(s: Session, d: AlertStateDelta) -> None:
    if d.whole:
        s.execute(delete(AlertStateRow).where(AlertStateRow.group_name == d.group))
    elif d.removed:
        s.execute(_STATES.delete().where(
            _STATES.c.group_name == d.group, _STATES.c.rule == bindparam("b_rule"),
            _STATES.c.fingerprint == bindparam("b_fp")),
            [{"b_rule": rule, "b_fp": fingerprint(labels)} for rule, labels in d.removed])
    if d.changed:
        rows = []
        for a in d.changed:
            row = _row(a, d.evaluated_ms)
            row["b_rule"], row["b_fp"] = row.pop("rule"), row.pop("fingerprint")
            del row["group_name"]
            rows.append(row)
        s.execute(_STATES.update().where(
            _STATES.c.group_name == d.group, _STATES.c.rule == bindparam("b_rule"),
            _STATES.c.fingerprint == bindparam("b_fp")), rows)
    if d.added:
        s.execute(_STATES.insert(), [_row(a, d.evaluated_ms) for a in d.added])
    at = ms_to_dt(d.evaluated_ms)
    moved = s.execute(update(AlertGroupEvalRow).where(AlertGroupEvalRow.group_name == d.group)
                      .values(evaluated_at=at).execution_options(synchronize_session=False))
    if getattr(moved, "rowcount", 1) == 0:
        s.execute(insert(AlertGroupEvalRow).values(group_name=d.group, evaluated_at=at))


def _row(a: Alert, last_eval_ms: int) -> dict[str, object]:
    return {
        "group_name": a.group, "rule": a.rule, "fingerprint": a.fingerprint,
        "labels": labels_to_json(a.labels), "annotations": labels_to_json(a.annotations),
        "state": str(a.state), "value": value_to_db(a.value),
        "active_at": ms_to_dt(a.active_at_ms), "last_eval": ms_to_dt(last_eval_ms),
        "fired_at": opt_ms_to_dt(a.fired_at_ms),
        "resolved_at": opt_ms_to_dt(a.resolved_at_ms),
        "keep_firing_since": opt_ms_to_dt(a.keep_firing_since_ms),
    }


def load(db: Database) -> list[Alert]:
    """The persisted alerts, ordered by group, rule and fingerprint.

    An alert's `last_eval_ms` is when its group was last evaluated (or its
    row's own, when later): Prometheus's `downAt` for restoring `for`.
    """
    with db.session() as s:
        evaluated = {g: dt_to_ms(at) for g, at in s.execute(
            select(AlertGroupEvalRow.group_name, AlertGroupEvalRow.evaluated_at))}
        rows = s.scalars(select(AlertStateRow).order_by(
            AlertStateRow.group_name, AlertStateRow.rule, AlertStateRow.fingerprint,
            AlertStateRow.id)).all()
        return [
            Alert(
                group=r.group_name, rule=r.rule, labels=labels_from_json(r.labels),
                annotations=labels_from_json(r.annotations), state=AlertState(r.state),
                value=value_from_db(r.value), active_at_ms=dt_to_ms(r.active_at),
                last_eval_ms=max(dt_to_ms(r.last_eval),
                                 evaluated.get(r.group_name, -(2**62))),
                fired_at_ms=opt_dt_to_ms(r.fired_at),
                resolved_at_ms=opt_dt_to_ms(r.resolved_at),
                keep_firing_since_ms=opt_dt_to_ms(r.keep_firing_since),
            )
            for r in rows
        ]


def forget_groups(db: Database, keep: Iterable[str]) -> int:
    """Delete the rows of groups not in `keep` (removed from the rule files); how many."""
    names = sorted(set(keep))
    with db.session() as s:
        n = s.execute(delete(AlertStateRow).where(AlertStateRow.group_name.not_in(names)))
        s.execute(delete(AlertGroupEvalRow).where(AlertGroupEvalRow.group_name.not_in(names)))
        return int(getattr(n, "rowcount", 0) or 0)
