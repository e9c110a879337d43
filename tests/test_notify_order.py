"""The notify worker sends what an evaluation queued before its act-first round reads the
database (daemon/notifier.py): a new page waits for nothing else, and a failing round does
not stop it."""

from __future__ import annotations

from notify_helpers import LoopbackReceiver
from test_notify_delivery import T0, alert

from sentinel.config import load_config
from sentinel.daemon.notifier import Notifier
from sentinel.daemon.selfmetrics import SelfMetrics
from sentinel.incidents import Database, IncidentTracker
from sentinel.respond.notify import actfirst


def test_a_new_page_goes_before_the_act_first_round_and_despite_its_failure(
        tmp_path, loopback: LoopbackReceiver, monkeypatch) -> None:  # noqa: ANN001
    (tmp_path / "sentinel.yaml").write_text(
        f"database: sqlite:///{tmp_path / 'sentinel.db'}\n"
        "notify: {interval: 1h, act_first: {grace: 2m}}\n"
        f"receivers:\n  - name: oncall\n    webhook: {{url: '{loopback.url('/hook')}'}}\n")
    config = load_config(tmp_path / "sentinel.yaml")
    db = Database(config.database)
    db.upgrade()
    sent_when_the_round_ran: list[int] = []

    def broken_round(*args: object, **kwargs: object) -> list[object]:
        sent_when_the_round_ran.append(len(loopback.accepted()))
        raise RuntimeError("the act-first round failed")

    monkeypatch.setattr(actfirst, "updates", broken_round)
    notifier = Notifier(config, db, SelfMetrics(), lambda: T0)
    try:
        # No policy covers the alert: its page is not held, and goes in this run.
        IncidentTracker(db, outbox=notifier.outbox).process([alert("a")], T0)
        notifier.run_once()
        assert [r.json()["status"] for r in loopback.accepted()] == ["firing"]  # type: ignore[index]
        assert sent_when_the_round_ran == [1]
    finally:
        db.dispose()
