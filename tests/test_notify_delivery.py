"""The notify stage end to end below the daemon: tracker → outbox → dispatcher → sender → HTTP.

Real receivers on 127.0.0.1, real SQLite and PostgreSQL; time is passed in.
"""

from __future__ import annotations

from dataclasses import replace

from fixtures_e2e import wait_for
from notify_helpers import LoopbackReceiver, make_stage
from sqlalchemy import select

from sentinel.config.notify import InhibitRuleConfig, RouteConfig
from sentinel.incidents import Database, get_incident, list_incidents
from sentinel.incidents.convert import dt_to_ms
from sentinel.incidents.models_notify import OutboxMessage
from sentinel.model import Alert, AlertState, labels_of
from sentinel.respond.notify.matchers import parse_matchers
from sentinel.respond.notify.sender import Sender
from sentinel.respond.notify.silences import add_silence
from sentinel.respond.notify.webhook import WebhookReceiver

T0 = 1_795_255_205_000  # 2026-11-21T10:00:05Z
S = 1000
MIN = 60 * S


def alert(target: str, name: str = "KVCacheHigh", at: int = T0, **extra: str) -> Alert:
    labels = labels_of({"alertname": name, "target": target, "severity": "page", **extra})
    return Alert(group="vllm", rule=name, labels=labels,
                 annotations=labels_of({"summary": f"{name} on {target}"}),
                 state=AlertState.FIRING, value=0.95, active_at_ms=at, last_eval_ms=at,
                 fired_at_ms=at)


def resolved(a: Alert, at: int) -> Alert:
    return replace(a, state=AlertState.INACTIVE, resolved_at_ms=at, last_eval_ms=at)


def hook(lb: LoopbackReceiver, name: str = "oncall", path: str = "/hook") -> WebhookReceiver:
    return WebhookReceiver(name, lb.url(path), timeout_s=5, external_url="http://sentinel:9465")


def outbox_rows(db: Database) -> list[OutboxMessage]:
    with db.session() as s:
        return list(s.scalars(select(OutboxMessage).order_by(OutboxMessage.id)))


def test_outage_then_recovery_delivers_each_message_exactly_once(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    stage = make_stage(incident_db, {"oncall": hook(loopback)})
    loopback.status = 500
    alerts = [alert(t) for t in ("a", "b", "c")]
    stage.tracker.process(alerts, T0)
    now = T0
    while now < T0 + 60 * MIN:  # the receiver is down for an hour
        stage.tick(now)
        now += 10 * S
    assert not loopback.accepted() and len(loopback.requests) > 10
    loopback.status = 200
    for _ in range(12):  # backoff is capped at a minute: two minutes bring everything
        stage.tick(now)
        now += 10 * S
    stage.tracker.process([resolved(a, now) for a in alerts], now)
    for _ in range(3):
        stage.tick(now)
        now += 10 * S
    per_key = loopback.accepted_per_key()
    assert len(per_key) == 6 and set(per_key.values()) == {1}, per_key
    statuses = sorted(r.json()["status"] for r in loopback.accepted())  # type: ignore[index]
    assert statuses == ["firing"] * 3 + ["resolved"] * 3
    assert all(r.status == "sent" for r in outbox_rows(incident_db))
    # Every attempt of one message carried the same key.
    keys_tried = {r.headers["Idempotency-Key"] for r in loopback.requests}
    assert keys_tried == set(per_key)
    detail = get_incident(incident_db, list_incidents(incident_db)[0].id)
    assert detail is not None
    kinds = [e.kind for e in detail.timeline]
    assert "notification_failed" in kinds and "notification_sent" in kinds


def test_permanent_4xx_is_recorded_and_escalated_to_the_fallback(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    loopback.status_by_path["/gone"] = 404
    receivers = {"oncall": hook(loopback, "oncall", "/gone"),
                 "pager": hook(loopback, "pager", "/pager")}
    route = RouteConfig.model_validate({"receiver": "oncall", "group_by": ["alertname"],
                                        "group_wait": "0s", "group_interval": "1m"})
    stage = make_stage(incident_db, receivers, route, fallback="pager")
    stage.tracker.process([alert("a")], T0)
    stage.tick(T0)
    stage.tick(T0 + S)
    rows = outbox_rows(incident_db)
    assert [(r.receiver, r.status, r.attempts) for r in rows] == [
        ("oncall", "failed", 1), ("pager", "sent", 1)]
    assert rows[1].escalated_from == rows[0].id
    assert len(loopback.accepted("/pager")) == 1
    assert [r.path for r in loopback.requests].count("/gone") == 1  # not retried
    detail = get_incident(incident_db, list_incidents(incident_db)[0].id)
    assert detail is not None
    messages = [e.message for e in detail.timeline]
    assert any("to oncall failed: HTTP 404" in m for m in messages), messages
    assert any(m.startswith("escalated to pager") for m in messages), messages


def test_retry_after_is_honoured(incident_db: Database, loopback: LoopbackReceiver) -> None:
    loopback.status, loopback.retry_after = 429, "120"
    stage = make_stage(incident_db, {"oncall": hook(loopback)})
    stage.tracker.process([alert("a")], T0)
    stage.tick(T0)
    [row] = outbox_rows(incident_db)
    assert dt_to_ms(row.next_attempt_at) - T0 >= 120 * S
    loopback.status = 200
    stage.tick(T0 + 60 * S)
    assert len(loopback.requests) == 1
    stage.tick(T0 + 121 * S)
    assert len(loopback.accepted()) == 1


def test_alert_storm_sends_one_message_per_group(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    route = RouteConfig.model_validate({"receiver": "oncall", "group_by": ["alertname"],
                                        "group_wait": "2s", "group_interval": "1m"})
    stage = make_stage(incident_db, {"oncall": hook(loopback)}, route)
    names = ["KVCacheHigh", "QueueBacklog", "TTFTHigh", "ProbeFailed"]
    storm = [alert(f"gemma-{t}", n) for t in range(50) for n in names]
    assert len(storm) == 200
    for i in range(10):  # ten evaluations within one second, 20 alerts each
        now = T0 + i * 100
        stage.tracker.process(storm[: (i + 1) * 20], now)
        stage.tick(now)
    stage.tick(T0 + 3 * S)
    stage.tick(T0 + 10 * S)
    bodies = [r.json() for r in loopback.accepted()]
    assert len(bodies) == len(names), [b["groupLabels"] for b in bodies]  # type: ignore[index]
    assert sorted(b["groupLabels"]["alertname"] for b in bodies) == sorted(names)  # type: ignore[index]
    assert all(len(b["alerts"]) == 50 for b in bodies)  # type: ignore[index]
    assert len(list_incidents(incident_db, limit=1000)) == 200


def test_silenced_and_inhibited_alerts_send_nothing_and_say_why(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    inhibit = (InhibitRuleConfig.model_validate({
        "source_matchers": ["alertname=TargetDown"], "target_matchers": ["alertname!=TargetDown"],
        "equal": ["target"]}),)
    stage = make_stage(incident_db, {"oncall": hook(loopback)}, inhibit=inhibit)
    sid = add_silence(incident_db, parse_matchers(['target="a"']), T0 - MIN, T0 + 60 * MIN,
                      "alice", "maintenance on a", T0 - MIN)
    stage.tracker.process([alert("a"), alert("b"), alert("b", "TargetDown")], T0)
    stage.tick(T0)
    stage.tick(T0 + S)
    sent = {(a["labels"]["alertname"], a["labels"]["target"])
            for r in loopback.accepted() for a in r.json()["alerts"]}  # type: ignore[index]
    assert sent == {("TargetDown", "b")}
    notes = {}
    for inc in list_incidents(incident_db):
        detail = get_incident(incident_db, inc.id)
        assert detail is not None
        notes[(inc.alertname, inc.target)] = [e for e in detail.timeline if e.kind == "note"]
    [silenced] = notes[("KVCacheHigh", "a")]
    assert f"silenced by silence {sid} by alice: maintenance on a" in silenced.message
    assert silenced.data is not None and silenced.data["silence_id"] == sid
    [inhibited] = notes[("KVCacheHigh", "b")]
    assert "inhibited by TargetDown" in inhibited.message
    assert notes[("TargetDown", "b")] == []


def test_killed_between_claim_and_outcome_resends_with_the_same_key(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    stage = make_stage(incident_db, {"oncall": hook(loopback)})
    stage.tracker.process([alert("a")], T0)
    stage.dispatcher.run(T0)
    [row] = outbox_rows(incident_db)
    assert stage.sender._claim(row.id, "oncall", T0)  # then the process dies
    fresh = Sender(incident_db, {"oncall": hook(loopback)}, stage.sender.outbox)
    assert fresh.run(T0 + S) == 0  # the lease still holds
    assert fresh.run(T0 + 60 * S) == 1
    assert loopback.accepted_per_key() == {row.idempotency_key: 1}
    [row] = outbox_rows(incident_db)
    assert (row.status, row.attempts) == ("sent", 2)


def test_resolution_queued_before_a_crash_is_sent_after_restart(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    a = alert("a")
    stage = make_stage(incident_db, {"oncall": hook(loopback)})
    stage.tracker.process([a], T0)
    stage.tick(T0)
    stage.tracker.process([resolved(a, T0 + MIN)], T0 + MIN)  # committed, then killed
    restarted = make_stage(incident_db, {"oncall": hook(loopback)})
    restarted.tracker.process([], T0 + MIN + 5 * S)  # the rule engine has nothing to say
    restarted.tick(T0 + MIN + 5 * S)
    statuses = [r.json()["status"] for r in loopback.accepted()]  # type: ignore[index]
    assert statuses == ["firing", "resolved"]


def test_repeat_interval_resends_an_unchanged_group(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    route = RouteConfig.model_validate({"receiver": "oncall", "group_by": ["alertname"],
                                        "group_wait": "0s", "group_interval": "5m",
                                        "repeat_interval": "1h"})
    stage = make_stage(incident_db, {"oncall": hook(loopback)}, route)
    stage.tracker.process([alert("a")], T0)
    for minute in range(0, 66, 5):
        stage.tick(T0 + minute * MIN)
    keys = [r.headers["Idempotency-Key"] for r in loopback.accepted()]
    assert len(keys) == 2 and keys[0] != keys[1]


def test_new_alert_in_a_sent_group_waits_for_group_interval(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    route = RouteConfig.model_validate({"receiver": "oncall", "group_by": ["alertname"],
                                        "group_wait": "0s", "group_interval": "5m"})
    stage = make_stage(incident_db, {"oncall": hook(loopback)}, route)
    stage.tracker.process([alert("a")], T0)
    stage.tick(T0)
    stage.tracker.process([alert("a"), alert("b", at=T0 + MIN)], T0 + MIN)
    stage.tick(T0 + MIN)
    stage.tick(T0 + 4 * MIN)
    assert len(loopback.accepted()) == 1
    stage.tick(T0 + 5 * MIN)
    bodies = [r.json() for r in loopback.accepted()]
    assert len(bodies) == 2 and len(bodies[1]["alerts"]) == 2  # type: ignore[index]


def test_fire_and_resolve_met_by_a_late_dispatcher_are_both_sent(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    # The daemon that fired was stopped before its dispatcher ran; the next one resolves:
    # both intents meet in one run. With group_wait 0 the firing was due when it was
    # written, so both pages go out (a group that only ever saw the resolve would send none).
    a = alert("a")
    stage = make_stage(incident_db, {"oncall": hook(loopback)})
    stage.tracker.process([a], T0)
    stage.tracker.process([resolved(a, T0 + 5 * S)], T0 + 5 * S)
    stage.tick(T0 + 8 * S)
    stage.tick(T0 + 9 * S)
    pages = [(b["status"], b["alerts"][0]["startsAt"])  # type: ignore[index]
             for b in (r.json() for r in loopback.accepted())]
    assert [status for status, _ in pages] == ["firing", "resolved"]
    assert pages[0][1] == pages[1][1]


def test_resolve_and_next_firing_met_by_a_late_dispatcher_are_both_sent(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    a = alert("a")
    stage = make_stage(incident_db, {"oncall": hook(loopback)})
    stage.tracker.process([a], T0)
    stage.tick(T0)
    stage.tracker.process([resolved(a, T0 + 5 * S)], T0 + 5 * S)  # then stopped
    stage.tracker.process([alert("a", at=T0 + 20 * S)], T0 + 20 * S)  # the next daemon
    stage.tick(T0 + 21 * S)
    stage.tick(T0 + 22 * S)
    pages = [(b["status"], b["alerts"][0]["startsAt"])  # type: ignore[index]
             for b in (r.json() for r in loopback.accepted())]
    assert [status for status, _ in pages] == ["firing", "resolved", "firing"]
    assert pages[0][1] == pages[1][1] != pages[2][1]
    assert [i.status for i in list_incidents(incident_db)] == ["open", "resolved"]


def test_fire_and_resolve_within_group_wait_send_nothing(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    # As Alertmanager: an alert that resolves before its group's first flush is never sent.
    route = RouteConfig.model_validate({"receiver": "oncall", "group_wait": "30s"})
    a = alert("a")
    stage = make_stage(incident_db, {"oncall": hook(loopback)}, route)
    stage.tracker.process([a], T0)
    stage.tick(T0 + S)
    stage.tracker.process([resolved(a, T0 + 10 * S)], T0 + 10 * S)
    stage.tick(T0 + 40 * S)
    assert loopback.accepted() == []


def test_the_notify_worker_sends_what_the_last_evaluation_wrote_when_stopped(
        tmp_path, loopback: LoopbackReceiver) -> None:  # noqa: ANN001
    # SIGTERM right after an evaluation fired: the page goes out in the drain, not when
    # (or if) the next daemon starts.
    from sentinel.config import load_config
    from sentinel.daemon.heartbeat import Heartbeats
    from sentinel.daemon.notifier import WORKER, Notifier
    from sentinel.daemon.selfmetrics import SelfMetrics
    from sentinel.incidents import IncidentTracker

    (tmp_path / "sentinel.yaml").write_text(
        f"database: sqlite:///{tmp_path / 'sentinel.db'}\n"
        "notify: {interval: 1h}\n"
        f"receivers:\n  - name: oncall\n    webhook: {{url: '{loopback.url('/hook')}'}}\n")
    config = load_config(tmp_path / "sentinel.yaml")
    db = Database(config.database)
    db.upgrade()
    beats = Heartbeats()
    notifier = Notifier(config, db, SelfMetrics(), lambda: T0, heartbeats=beats)
    try:
        notifier.start()
        # Its first run is over; the next is an hour away.
        wait_for(lambda: any(b.worker == WORKER and b.runs for b in beats.beats()), 10,
                 "the notify worker's first run")
        IncidentTracker(db, outbox=notifier.outbox).process([alert("a")], T0)  # no kick
        assert loopback.accepted() == []
        notifier.stop(5)
        assert [r.json()["status"] for r in loopback.accepted()] == ["firing"]  # type: ignore[index]
    finally:
        notifier.stop(1)
        db.dispose()
