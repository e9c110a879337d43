"""One-off pages (remediation refused / gave up): routed, silenced, sent once, escalated."""

from __future__ import annotations

from sqlalchemy import select

from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, TimelineEvent
from sentinel.incidents.models_notify import OutboxMessage
from sentinel.respond.notify.matchers import parse_matchers
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.page import page_once
from sentinel.respond.notify.routing import build_route
from sentinel.respond.notify.silences import add_silence
from sentinel.respond.remediate.pager import NotifyPager

T0 = 1_795_000_000_000


def _incident(db: Database) -> int:
    from sentinel.incidents.convert import ms_to_dt
    with db.session() as s:
        row = Incident(group_key="k", alertname="VLLMHBMOutOfMemory", target="tpu-a",
                       status="open", severity="critical", summary="", labels={},
                       opened_at=ms_to_dt(T0), resolved_at=None, updated_at=ms_to_dt(T0))
        s.add(row)
        s.flush()
        return row.id


def _pages(db: Database, incident_id: int, *, escalate: bool, now_ms: int = T0) -> list[str]:
    queued: list[list[str]] = []
    outbox = Outbox("fallback")
    route = build_route(None, ["oncall", "chat"])

    def notify(notification, now, esc) -> None:  # noqa: ANN001
        with db.session() as s:
            queued.append(page_once(s, outbox, route, notification, now, escalate=esc))

    title_reason = ("cold_cache: /dev/shm/xla is empty" if not escalate else "breaker open")
    NotifyPager(notify, lambda: now_ms).page(
        incident_id, "SentinelRemediationGaveUp" if escalate else "SentinelRemediationRefused",
        title_reason, {"target": "tpu-a", "policy": "restart"})
    return queued[0]


def _messages(db: Database) -> list[OutboxMessage]:
    with db.session() as s:
        return list(s.scalars(select(OutboxMessage).order_by(OutboxMessage.id)))


def test_a_refusal_goes_once_to_every_routed_receiver(incident_db: Database) -> None:
    incident = _incident(incident_db)
    assert _pages(incident_db, incident, escalate=False) == ["chat", "oncall"]
    assert _pages(incident_db, incident, escalate=False) == []  # the same page again: nothing
    msgs = _messages(incident_db)
    assert sorted(m.receiver for m in msgs) == ["chat", "oncall"]
    assert len({m.idempotency_key for m in msgs}) == 2
    alert = msgs[0].notification["alerts"][0]
    assert alert["labels"]["alertname"] == "SentinelRemediationRefused"
    assert alert["annotations"]["summary"] == "cold_cache: /dev/shm/xla is empty"


def test_giving_up_also_escalates_to_the_fallback(incident_db: Database) -> None:
    incident = _incident(incident_db)
    assert _pages(incident_db, incident, escalate=True) == ["chat", "oncall"]
    assert sorted(m.receiver for m in _messages(incident_db)) == ["chat", "fallback", "oncall"]
    with incident_db.session() as s:
        notes = [e.message for e in s.scalars(select(TimelineEvent))]
    assert notes == ["escalated to fallback: breaker open"]


def test_a_silenced_page_sends_nothing_and_says_why(incident_db: Database) -> None:
    incident = _incident(incident_db)
    add_silence(incident_db, parse_matchers(['target="tpu-a"']), T0 - 1000, T0 + 60_000,
                "ops", "maintenance", T0 - 1000)
    assert _pages(incident_db, incident, escalate=True) == []
    assert _messages(incident_db) == []
    with incident_db.session() as s:
        (note,) = s.scalars(select(TimelineEvent)).all()
    assert note.message.startswith("page SentinelRemediationGaveUp not sent: ")
