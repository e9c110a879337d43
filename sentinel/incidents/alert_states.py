"""Persisted rule-engine alerts: what `RuleManager.restore` gets back after a restart.

The whole set is replaced at once (delete + insert in one transaction), so a
reader never sees half of one evaluation's state. Values round-trip exactly
(NaN is stored as NULL); label order does not matter, labels come back sorted.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, insert, select
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
from sentinel.incidents.models import AlertStateRow
from sentinel.model import Alert, AlertState


def save(db: Database, alerts: Sequence[Alert]) -> None:
    """Replace the persisted set with `alerts`."""
    with db.session() as s:
        save_in(s, alerts)


def save_in(s: Session, alerts: Sequence[Alert]) -> None:
    """Replace the persisted set with `alerts`, in the caller's transaction.

    The incident stage calls this in the transaction that records the same
    evaluation's transitions, so a crash can never leave the rule state and
    the incidents telling different stories (issue 10).
    """
    rows = [_row(a) for a in alerts]
    s.execute(delete(AlertStateRow))
    if rows:
        s.execute(insert(AlertStateRow), rows)


def _row(a: Alert) -> dict[str, object]:
    return {
        "group_name": a.group, "rule": a.rule, "fingerprint": a.fingerprint,
        "labels": labels_to_json(a.labels), "annotations": labels_to_json(a.annotations),
        "state": str(a.state), "value": value_to_db(a.value),
        "active_at": ms_to_dt(a.active_at_ms), "last_eval": ms_to_dt(a.last_eval_ms),
        "fired_at": opt_ms_to_dt(a.fired_at_ms),
        "resolved_at": opt_ms_to_dt(a.resolved_at_ms),
        "keep_firing_since": opt_ms_to_dt(a.keep_firing_since_ms),
    }


def load(db: Database) -> list[Alert]:
    """The persisted alerts, ordered by group, rule and fingerprint."""
    with db.session() as s:
        rows = s.scalars(select(AlertStateRow).order_by(
            AlertStateRow.group_name, AlertStateRow.rule, AlertStateRow.fingerprint,
            AlertStateRow.id)).all()
        return [
            Alert(
                group=r.group_name, rule=r.rule, labels=labels_from_json(r.labels),
                annotations=labels_from_json(r.annotations), state=AlertState(r.state),
                value=value_from_db(r.value), active_at_ms=dt_to_ms(r.active_at),
                last_eval_ms=dt_to_ms(r.last_eval), fired_at_ms=opt_dt_to_ms(r.fired_at),
                resolved_at_ms=opt_dt_to_ms(r.resolved_at),
                keep_firing_since_ms=opt_dt_to_ms(r.keep_firing_since),
            )
            for r in rows
        ]
