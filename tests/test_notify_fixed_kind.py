"""A "fixed by Sentinel" notice is a kind of its own (issue 48): a chat receiver with
`send_resolved: false` (a common setting) still gets it, and a resolved still does not.

Tracker → act-first hold → fix → outbox → sender → a webhook on loopback, with time
handed in, as the daemon's Notifier.recovered wires them.
"""

from __future__ import annotations

import random
from dataclasses import replace

from notify_helpers import LoopbackReceiver, Stage, loopback  # noqa: F401
from test_notify_actfirst import GRACE, T0, S, bodies, crash

from sentinel.incidents import Database
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.tracker import IncidentTracker
from sentinel.model import AlertState, NotificationKind
from sentinel.respond.notify import actfirst
from sentinel.respond.notify.dispatcher import Dispatcher, DispatchSettings
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.routing import build_route
from sentinel.respond.notify.sender import RetryPolicy, Sender
from sentinel.respond.notify.webhook import WebhookReceiver


def _stage(db: Database, lb: LoopbackReceiver) -> tuple[Stage, Outbox]:
    outbox = Outbox()
    chat = WebhookReceiver("chat", lb.url(), timeout_s=5, send_resolved=False)
    settings = DispatchSettings(build_route(None, ["chat"]), send_resolved={"chat": False},
                                annotations=actfirst.with_act_first(None))
    tracker = IncidentTracker(db, outbox=outbox, act_first=lambda a: (GRACE, "restart acts"))
    return Stage(tracker, Dispatcher(db, outbox, settings),
                 Sender(db, {"chat": chat}, outbox, RetryPolicy(1_000, 60_000, 3600_000),
                        rng=random.Random(1))), outbox


def test_the_fixed_notice_reaches_a_receiver_with_send_resolved_off(
        incident_db: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    st, outbox = _stage(incident_db, loopback)
    (n,) = st.tracker.process([crash()], T0)
    with incident_db.session() as s:
        assert actfirst.fix(s, n.incident_id, ms_to_dt(T0 + 9 * S), "restart verified")
        message = actfirst.fixed_notification(s, n.incident_id, {}, {"action": "restart"})
        assert message is not None and message.kind is NotificationKind.FIXED
        outbox.add_message(s, "chat", message, T0 + 9 * S)
    st.tick(T0 + 9 * S)
    (body,) = bodies(loopback)
    assert body["alerts"][0]["annotations"]["sentinel_outcome"] == "fixed"
    assert body["status"] == "resolved"  # Alertmanager's shape: the alerts ended
    st.tick(T0 + GRACE + 10 * S)
    assert len(bodies(loopback)) == 1  # once, and no page


def test_a_resolved_is_still_dropped_where_send_resolved_is_off(
        incident_db: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    st, _ = _stage(incident_db, loopback)
    first = st.tracker.process([crash()], T0)
    with incident_db.session() as s:
        assert actfirst.release(s, first[0].incident_id, ms_to_dt(T0), "restart refused")
    st.tick(T0)
    assert [b["status"] for b in bodies(loopback)] == ["firing"]
    st.tracker.process([replace(crash(), state=AlertState.INACTIVE,
                                resolved_at_ms=T0 + 300 * S)], T0 + 300 * S)
    st.tick(T0 + 300 * S)
    assert [b["status"] for b in bodies(loopback)] == ["firing"]
