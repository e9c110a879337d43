"""Issue 48: Alertmanager as a receiver is fed like Prometheus's notifier feeds it.

Every alert state change reaches Alertmanager at the notify round that follows
the evaluation that made it (Sentinel's group_wait and group_interval do not
delay it: Alertmanager waits and groups itself), resends go every resend
interval, and after Alertmanager was down the first attempt after it is back
tells it everything it holds. The stage is wired as the daemon wires it
(tracker → dispatcher → resender) on a real database, against the real
`prometheus-alertmanager`, with the clock passed in: a round is one call, so
"within one evaluation" is "after the round that took the evaluation in",
whatever the machine's load. Alertmanager reads endsAt against its own wall
clock, so Sentinel's clock runs half an hour behind it (a resolved alert's end is
past for Alertmanager) and the resend interval is an hour (a firing alert's
endsAt, 4 intervals ahead, is not).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from fixtures_alertmanager import RealAlertmanager
from notify_helpers import LoopbackReceiver

from sentinel.config.notify import RouteConfig
from sentinel.demo import WebhookSink
from sentinel.incidents.db import Database
from sentinel.incidents.tracker import IncidentTracker
from sentinel.model import Alert, AlertState, labels_of
from sentinel.respond.notify import amfeed
from sentinel.respond.notify.alertmanager import AlertmanagerReceiver
from sentinel.respond.notify.amresend import RETRY_MS, AlertmanagerResender
from sentinel.respond.notify.codec import alert_to_json
from sentinel.respond.notify.dispatcher import Dispatcher, DispatchSettings
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.routing import build_route
from sentinel.respond.notify.sender import RetryPolicy, Sender
from sentinel.respond.notify.webhook import WebhookReceiver

T0 = 1_714_564_800_000
S = 1000
MIN = 60 * S


def _alert(name: str, at: int, target: str = "a") -> Alert:
    return Alert(group="g", rule=name,
                 labels=labels_of({"alertname": name, "target": target, "severity": "page"}),
                 annotations=labels_of({"summary": f"{name} on {target}"}),
                 state=AlertState.FIRING, value=1.0, active_at_ms=at, last_eval_ms=at,
                 fired_at_ms=at)


def _resolved(a: Alert, at: int) -> Alert:
    return replace(a, state=AlertState.INACTIVE, resolved_at_ms=at, last_eval_ms=at)


# -- amfeed.push, one row per rule -------------------------------------------------------


def _entry(alert: Alert, *, pushed: Alert | None = None, muted: str | None = None) -> dict:
    entry = {"alert": alert_to_json(alert), "incident_id": 1, "muted": muted}
    if pushed is not None:
        entry["pushed"] = alert_to_json(pushed)
    return entry


FIRING = _alert("A", T0)
ENDED = _resolved(FIRING, T0 + MIN)


@pytest.mark.parametrize(("why", "entry", "route_open", "now", "pushed", "changed"), [
    ("a new firing alert is pushed at once", _entry(FIRING), True, T0, FIRING, 1),
    ("pushed already: no change", _entry(FIRING, pushed=FIRING), True, T0, FIRING, 0),
    ("its end is pushed", _entry(ENDED, pushed=FIRING), True, T0 + MIN, ENDED, 1),
    ("its end is pushed though muted", _entry(ENDED, pushed=FIRING, muted="silenced"), True,
     T0 + MIN, ENDED, 1),
    ("a muted firing alert is not pushed", _entry(FIRING, muted="silenced"), True, T0, None, 0),
    ("a mute window keeps what was pushed", _entry(ENDED, pushed=FIRING), False, T0 + MIN,
     FIRING, 0),
    ("a mute window pushes nothing new", _entry(FIRING), False, T0, None, 0),
    ("a pushed end is kept for the retention", _entry(ENDED, pushed=ENDED), True,
     T0 + MIN + amfeed.RESOLVED_RETENTION_MS - 1, ENDED, 0),
])
def test_push(why: str, entry: dict, route_open: bool, now: int, pushed: Alert | None,
              changed: int) -> None:
    out, n = amfeed.push({"fp": entry}, route_open, now)
    assert n == changed, why
    assert out["fp"].get("pushed") == (alert_to_json(pushed) if pushed else None), why


@pytest.mark.parametrize(("why", "entry", "now"), [
    ("resolved before Alertmanager heard of it", _entry(ENDED), T0 + MIN),
    ("its end is older than the retention", _entry(ENDED, pushed=ENDED),
     T0 + MIN + amfeed.RESOLVED_RETENTION_MS),
])
def test_push_drops(why: str, entry: dict, now: int) -> None:
    assert amfeed.push({"fp": entry}, True, now) == ({}, 0), why


def test_told_leaves_out_a_firing_alert_muted_since_but_not_its_end() -> None:
    assert amfeed.told(_entry(FIRING, pushed=FIRING, muted="silenced")) is None
    assert amfeed.told(_entry(ENDED, pushed=ENDED, muted="silenced")) == alert_to_json(ENDED)
    assert amfeed.told(_entry(FIRING)) is None


# -- against the real Alertmanager ------------------------------------------------------


@dataclass
class Feed:
    """The daemon's notify round, below the daemon: dispatch, send, then post to AM."""

    tracker: IncidentTracker
    dispatcher: Dispatcher
    sender: Sender
    resender: AlertmanagerResender

    def evaluate(self, alerts: list[Alert], now_ms: int) -> dict:
        """An evaluation's alert states, then the notify round it kicks."""
        self.tracker.process(alerts, now_ms)
        return self.round(now_ms)

    def round(self, now_ms: int) -> dict:
        """One notify round (Notifier.run_once's order)."""
        stats = self.dispatcher.run(now_ms)
        self.sender.run(now_ms)
        return self.resender.run(now_ms, changed=stats.intents > 0 or stats.pushed > 0)


@pytest.fixture
def am(tmp_path: Path) -> Iterator[RealAlertmanager]:
    hook = WebhookSink().start()
    am = RealAlertmanager(tmp_path, "5m", hook.url)
    yield am
    am.stop()
    hook.stop()


def _feed(db: Database, am: RealAlertmanager, chat: LoopbackReceiver) -> Feed:
    """Two routes: the Alertmanager and a chat webhook, both with Sentinel's 10-minute
    group_wait and group_interval (the chat waits them, Alertmanager does not)."""
    route = RouteConfig.model_validate({
        "receiver": "am", "group_by": ["alertname"], "group_wait": "10m",
        "group_interval": "10m", "repeat_interval": "4h",
        "routes": [{"receiver": "am", "continue": True}, {"receiver": "chat"}]})
    rx = AlertmanagerReceiver("am", am.url, timeout_s=2, resend_interval_ms=60 * MIN)
    chat_rx = WebhookReceiver("chat", chat.url(), timeout_s=5)
    outbox = Outbox(None)
    settings = DispatchSettings(build_route(route, ["am", "chat"]), direct=frozenset({"am"}))
    return Feed(IncidentTracker(db, outbox=outbox), Dispatcher(db, outbox, settings),
                Sender(db, {"am": rx, "chat": chat_rx}, outbox,
                       RetryPolicy(initial_ms=1_000, max_ms=60_000, give_up_after_ms=3_600_000)),
                AlertmanagerResender(db, [rx, chat_rx]))


@pytest.mark.integration
def test_alertmanager_hears_each_change_at_the_round_that_follows_it(
        incident_db: Database, am: RealAlertmanager, loopback: LoopbackReceiver) -> None:
    """Fires: in Alertmanager after that round, though Sentinel's group_wait is 10 min
    (the chat route waits it); resolves: gone from Alertmanager's active alerts after that
    round; Alertmanager down and back (restarted, so it holds nothing): the first attempt
    after it is back, RETRY_MS after the failed one, posts everything it should hold."""
    feed = _feed(incident_db, am, loopback)
    now = int(time.time() * 1000) - 30 * MIN  # see the module's docstring
    crash = _alert("Crash", now)
    feed.evaluate([crash], now)
    (held,) = am.alerts("Crash")
    assert held["status"]["state"] == "active"
    assert not loopback.requests, "the chat route waits its group_wait; only Alertmanager not"

    now += 5 * S
    feed.evaluate([_resolved(crash, now)], now)
    assert am.alerts("Crash") == [], "the resolve reached Alertmanager at once"

    now += 5 * S
    queue = _alert("Queue", now)
    feed.evaluate([queue], now)
    assert len(am.alerts("Queue")) == 1
    am.stop()  # Alertmanager goes away; a new alert fires meanwhile
    now += 5 * S
    down = _alert("Down", now)
    failed = feed.evaluate([down], now)
    assert failed and not any(r.ok for r in failed["am"])
    am.start()  # back, empty: Alertmanager keeps alerts in memory only
    assert feed.round(now + RETRY_MS - 1) == {}, "not due before RETRY_MS"
    results = feed.round(now + RETRY_MS)["am"]
    assert results and all(r.ok for r in results)
    assert [len(am.alerts(n)) for n in ("Queue", "Down", "Crash")] == [1, 1, 0]
    assert not loopback.requests  # the chat's group_wait has not passed on Sentinel's clock
    feed.round(now + 10 * MIN)
    assert loopback.accepted(), "the chat route still sends at its group_wait"
