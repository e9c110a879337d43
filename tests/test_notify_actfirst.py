"""Act first, then tell once (issue 33): the held page, step by step, with time passed in.

Tracker → outbox → dispatcher → sender on one database, as the daemon wires them, and
a webhook on loopback. The hold is a database row: a restart (fresh objects on the same
database) during the grace neither loses the page nor sends it twice.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from notify_helpers import LoopbackReceiver, Stage, loopback  # noqa: F401

from sentinel.config import parse_config
from sentinel.config.errors import ConfigError
from sentinel.incidents import Database, get_incident
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.tracker import IncidentTracker
from sentinel.model import Alert, AlertState, Notification, NotificationKind, labels_of
from sentinel.respond.notify import actfirst
from sentinel.respond.notify.dispatcher import Dispatcher, DispatchSettings
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.payload import alertmanager_payload
from sentinel.respond.notify.routing import build_route
from sentinel.respond.notify.sender import RetryPolicy, Sender
from sentinel.respond.notify.webhook import WebhookReceiver
from sentinel.respond.remediate.actfirst_grace import act_first

T0 = 1_795_255_205_000
S = 1000
GRACE = 60 * S


def crash(at: int = T0) -> Alert:
    return Alert(group="vllm", rule="VLLMHBMOutOfMemory",
                 labels=labels_of({"alertname": "VLLMHBMOutOfMemory", "target": "tpu-a",
                                   "severity": "critical"}),
                 annotations=labels_of({"summary": "HBM OOM on tpu-a"}),
                 state=AlertState.FIRING, value=1.0, active_at_ms=at, last_eval_ms=at,
                 fired_at_ms=at)


def stage(db: Database, lb: LoopbackReceiver, held: bool = True) -> Stage:
    """A freshly built stage (a restarted daemon), holding pages while a policy acts."""
    outbox = Outbox()
    hook = WebhookReceiver("oncall", lb.url(), timeout_s=5)
    settings = DispatchSettings(build_route(None, ["oncall"]),
                                annotations=actfirst.with_act_first(None))
    tracker = IncidentTracker(db, outbox=outbox, act_first=(
        (lambda a: (GRACE, "policy restart acts")) if held else None))
    return Stage(tracker, Dispatcher(db, outbox, settings),
                 Sender(db, {"oncall": hook}, outbox, RetryPolicy(1_000, 60_000, 3600_000),
                        rng=random.Random(1)))


def bodies(lb: LoopbackReceiver) -> list[dict]:
    return [r.json() for r in lb.accepted()]  # type: ignore[misc]


def test_a_held_page_survives_a_restart_and_goes_when_the_grace_runs_out(
        incident_db: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    first = stage(incident_db, loopback)
    (n,) = first.tracker.process([crash()], T0)
    first.tick(T0)
    assert bodies(loopback) == []  # held while Sentinel acts
    again = stage(incident_db, loopback)  # a restart during the grace
    again.tracker.process([crash()], T0 + 30 * S)
    again.tick(T0 + 30 * S)
    assert bodies(loopback) == []
    with incident_db.session() as s:
        assert actfirst.expire(s, ms_to_dt(T0 + GRACE - 1)) == []
        assert actfirst.expire(s, ms_to_dt(T0 + GRACE)) == [n.incident_id]
    again.tick(T0 + GRACE)
    (page,) = bodies(loopback)
    assert page["status"] == "firing"
    assert "not verified recovered" in page["alerts"][0]["annotations"][actfirst.REMEDIATION]
    again.tick(T0 + GRACE + 10 * S)
    assert len(bodies(loopback)) == 1  # once


def test_a_refusal_releases_the_page_at_once_with_its_reason(
        incident_db: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    st = stage(incident_db, loopback)
    (n,) = st.tracker.process([crash()], T0)
    with incident_db.session() as s:
        assert actfirst.release(s, n.incident_id, ms_to_dt(T0 + 100), "restart refused: cold")
        assert not actfirst.release(s, n.incident_id, ms_to_dt(T0 + 200), "again")
    st.tick(T0 + 100)
    (page,) = bodies(loopback)
    assert page["alerts"][0]["annotations"][actfirst.REMEDIATION] == "restart refused: cold"
    notes = [e.message for e in get_incident(incident_db, n.incident_id).timeline
             if e.kind == "note"]
    assert any(m.startswith("page held up to 60s") for m in notes)
    assert "paging now: restart refused: cold" in notes


def test_a_fix_within_the_grace_drops_the_page_for_good(
        incident_db: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    st = stage(incident_db, loopback)
    (n,) = st.tracker.process([crash()], T0)
    with incident_db.session() as s:
        assert actfirst.fix(s, n.incident_id, ms_to_dt(T0 + 5 * S), "restart verified")
        assert actfirst.expire(s, ms_to_dt(T0 + GRACE)) == []
    st.tracker.process([crash()], T0 + 10 * S)  # still firing from its window
    st.tick(T0 + GRACE)
    assert bodies(loopback) == []


def test_without_a_policy_nothing_waits(
        incident_db: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    st = stage(incident_db, loopback, held=False)
    st.tracker.process([crash()], T0)
    st.tick(T0)
    assert len(bodies(loopback)) == 1


def test_an_update_says_update_under_the_same_group_key() -> None:
    n = Notification(7, NotificationKind.UPDATE, (crash(),), (("target", "tpu-a"),),
                     group_key="0/oncall:{target=\"tpu-a\"}")
    body = alertmanager_payload(n, "oncall", "http://s", T0)
    assert body["status"] == "update" and body["groupKey"] == n.group_key
    assert body["alerts"][0]["status"] == "firing"


POLICY = {"name": "restart", "alerts": ["VLLMHBMOutOfMemory"],
          "steps": [{"docker_restart": {"container": "vllm"}, "timeout": "20s",
                     "verify_deadline": "10s"}]}


@pytest.mark.parametrize(("why", "notify", "policy", "dry_run", "expect"), [
    ("timeout + verify_deadline", {}, {}, False, 30 * S),
    ("capped by notify.act_first.grace", {"act_first": {"grace": "15s"}}, {}, False, 15 * S),
    ("grace 0s turns waiting off", {"act_first": {"grace": "0s"}}, {}, False, None),
    ("a dry run acts on nothing", {}, {"dry_run": True}, False, None),
    ("a global dry run acts on nothing", {}, {}, True, None),
    # parked at once, which releases the page with the approval links folded in
    ("approval is held until it is parked", {}, {"approval": "required"}, False, 30_000),
    ("another alert is not covered", {}, {"alerts": ["VLLMEngineDead"]}, False, None),
])
def test_how_long_a_page_waits(why: str, notify: dict, policy: dict, dry_run: bool,
                               expect: int | None) -> None:
    config = parse_config({"notify": notify, "remediation": {
        "dry_run": dry_run, "policies": [{**POLICY, **policy}]}})
    ask = act_first(config)
    held = ask(crash()) if ask is not None else None
    assert (held[0] if held else None) == expect, why


def test_act_first_config_names_an_existing_receiver_and_the_join_window() -> None:
    config = parse_config({"receivers": [{"name": "chat", "webhook": {"url": "http://c/h"}}],
                           "notify": {"act_first": {"receiver": "chat", "grace": "90s"},
                                      "join_window": "5m"}})
    assert config.notify.act_first.receiver == "chat"
    assert config.notify.act_first.grace_ms == 90 * S
    assert config.notify.join_window_ms == 5 * 60 * S
    defaults = parse_config({})
    assert defaults.notify.act_first.grace_ms == 120 * S
    assert defaults.notify.act_first.receiver is None
    with pytest.raises(ConfigError, match="notify.act_first.receiver: unknown receiver 'pager'"):
        parse_config({"notify": {"act_first": {"receiver": "pager"}}})


def test_pagerduty_and_slack_updates_name_the_same_page() -> None:
    from sentinel.respond.notify.pagerduty import pagerduty_body
    from sentinel.respond.notify.slack import slack_body

    alert = crash()
    runbook = replace(alert, annotations=labels_of({**dict(alert.annotations),
                                                    "runbook": "model: lower max-model-len"}))
    key = "0/oncall:{target=\"tpu-a\"}"
    page = Notification(7, NotificationKind.FIRING, (alert,), (), group_key=key)
    update = Notification(7, NotificationKind.UPDATE, (runbook,), (), group_key=key)
    first = pagerduty_body(page, "rk", {}, "critical", "http://s")
    again = pagerduty_body(update, "rk", {}, "critical", "http://s")
    assert again["event_action"] == "trigger" and again["dedup_key"] == first["dedup_key"]
    assert again["payload"]["custom_details"]["annotations"]["runbook"] == \
        "model: lower max-model-len"
    assert slack_body(update, "")["text"].startswith("[UPDATE")


def test_a_remediation_page_folds_into_the_held_page_and_still_escalates(
        incident_db: Database) -> None:
    from sqlalchemy import select

    from sentinel.daemon.notifier import Notifier
    from sentinel.daemon.selfmetrics import SelfMetrics
    from sentinel.incidents.models_notify import OutboxMessage
    from sentinel.respond.remediate.pager import NotifyPager

    config = parse_config({
        "receivers": [{"name": "oncall", "webhook": {"url": "http://127.0.0.1:9/h"}},
                      {"name": "pager", "webhook": {"url": "http://127.0.0.1:9/p"}}],
        "notify": {"route": {"receiver": "oncall", "group_wait": "0s"},
                   "fallback_receiver": "pager"}})
    notifier = Notifier(config, incident_db, SelfMetrics(), lambda: T0)
    tracker = IncidentTracker(incident_db, outbox=notifier.outbox,
                              act_first=lambda a: (GRACE, "policy restart acts"))
    (n,) = tracker.process([crash()], T0)
    pager = NotifyPager(notifier.page, lambda: T0 + S, notifier.recovered, notifier.not_fixed)
    pager.page(n.incident_id, "SentinelRemediationGaveUp", "breaker open on tpu-a",
               {"target": "tpu-a", "reason": "breaker_open"})
    notifier.dispatcher.run(T0 + S)
    with incident_db.session() as s:
        rows = [(m.receiver, m.notification["alerts"][0]["labels"]["alertname"])
                for m in s.scalars(select(OutboxMessage).order_by(OutboxMessage.id))]
    # One page: the crash's own, saying why; the fallback is told as it always was.
    assert sorted(rows) == [("oncall", "VLLMHBMOutOfMemory"),
                            ("pager", "SentinelRemediationGaveUp")], rows
