"""Issue 33: a real Alertmanager never resolves an alert Sentinel still has firing.

The daemon (App) scrapes the simulator; a queue-backlog rule fires while the
simulator reports a backlog. The
only receiver is a real Alertmanager (Debian's `prometheus-alertmanager`)
whose own route sends to a webhook sink, so anything Alertmanager decides
(firing, resolved) is seen there as well as in its API. Sentinel's route has an
hour's group_wait, group_interval and repeat_interval: Alertmanager is fed as
Prometheus feeds it (amfeed.py, amresend.py), so none of them delays it, and the
alert reaching it at all within the test's deadline shows that. Clearing the backlog resolves the
alert in Sentinel; Alertmanager must follow within one resend interval.

Alertmanager reads endsAt against its own wall clock, so these tests run in
real time: the fast one with a 1 s resend interval and a 1 s resolve_timeout,
the slow one with the issue's figures (resolve_timeout 1m, the default 1 m
resend interval, 5 minutes of firing).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import pytest
from fixtures_alertmanager import RealAlertmanager as _Alertmanager
from fixtures_e2e import wait_for, write_config

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.demo import WebhookSink
from sentinel.incidents import queries
from sentinel.incidents.convert import dt_to_ms
from sentinel.model import Alert, AlertState, Notification, NotificationKind, labels_of
from sentinel.respond.notify.alertmanager import postable_alerts

T0 = 1_714_564_800_000  # 2024-05-01T12:00:00Z

RULES = """\
groups:
  - name: g
    interval: {interval}
    rules:
      - alert: ServingAlert
        expr: vllm:num_requests_waiting > 5
        keep_firing_for: {keep}  # a slow scrape on a busy machine does not resolve it
        labels: {severity: page}
"""


class RealAlertmanager(_Alertmanager):
    """The shared Alertmanager, asked about ServingAlert."""

    def active(self) -> list[dict]:
        """ServingAlert as Alertmanager holds it, if not resolved."""
        return self.alerts("ServingAlert")


def test_postable_alerts_end_ahead_while_firing_and_at_resolution_when_resolved() -> None:
    """Prometheus's notifier: endsAt = now + 4 x resend interval; resolved: its end."""
    firing = Alert(group="g", rule="A", labels=labels_of({"alertname": "A", "t": "1"}),
                   annotations=(), state=AlertState.FIRING, value=1.0, active_at_ms=T0,
                   last_eval_ms=T0 + 5_000, fired_at_ms=T0)
    resolved = replace(firing, labels=labels_of({"alertname": "A", "t": "2"}),
                       state=AlertState.INACTIVE, resolved_at_ms=T0 + 7_250)
    note = Notification(1, NotificationKind.FIRING, (firing, resolved))
    posted = postable_alerts(note, "http://s", T0 + 10_000, resend_interval_ms=60_000)
    assert [a["endsAt"] for a in posted] == ["2024-05-01T12:04:10Z", "2024-05-01T12:00:07.25Z"]
    assert all(a["startsAt"] == "2024-05-01T12:00:00Z" for a in posted)


@pytest.fixture
def am_hook() -> Iterator[WebhookSink]:
    s = WebhookSink().start()
    yield s
    s.stop()


@dataclass(frozen=True)
class Pace:
    """How often Sentinel scrapes and evaluates, and the test asks Alertmanager."""

    interval: str  # the rule group's
    scrape: str
    keep_firing_for: str  # over two scrape intervals: one failed scrape resolves nothing
    poll_s: float  # a false resolution Alertmanager noticed between polls reaches the hook


FAST = Pace("200ms", "1s", "3s", 0.25)
# Six minutes of 1 s scrapes cost ~12 CPU-s (measured), for nothing the test shows.
SLOW = Pace("1s", "5s", "15s", 1.0)


def _start(tmp_path: Path, sim, am: RealAlertmanager, resend: str,  # noqa: ANN001
           pace: Pace) -> App:
    rules = RULES.replace("{interval}", pace.interval).replace("{keep}", pace.keep_firing_for)
    cfg = write_config(tmp_path, [("tpu-a", sim.url)], None, rules,
                       scrape_interval=pace.scrape)
    cfg.write_text(cfg.read_text() + f"""\
probe_interval: 0s
receivers:
  - name: am
    alertmanager: {{url: '{am.url}', resend_interval: {resend}, timeout: 2s}}
notify:
  route: {{receiver: am, group_by: [alertname], group_wait: 1h, group_interval: 1h,
           repeat_interval: 4h}}
""")
    app = App(load_config(cfg))
    app.start()
    return app


def _resolved_by_am(hook: WebhookSink) -> list[dict]:
    return [b for _, b, _ in list(hook.received) if b.get("status") == "resolved"]


def _resolved_at_ms(app: App) -> int | None:
    """When Sentinel resolved ServingAlert, by its own clock (the incident's alert)."""
    assert app.pipeline is not None
    db = app.pipeline.tracker.db
    for summary in queries.list_incidents(db, alertname="ServingAlert"):
        detail = queries.get_incident(db, summary.id)
        assert detail is not None
        for a in detail.alerts:
            if a.resolved_at is not None:
                return dt_to_ms(a.resolved_at)
    return None


def _rfc3339_ms(text: str) -> int:
    """Alertmanager's endsAt (RFC 3339, any fraction) in epoch milliseconds."""
    return dt_to_ms(datetime.fromisoformat(text))


def _firing(app: App) -> list:
    assert app.pipeline is not None
    return [a for a in app.pipeline.rules.active_alerts()
            if a.rule == "ServingAlert" and a.state == AlertState.FIRING]


def _stays_firing_then_resolves(tmp_path: Path, sim, am_hook: WebhookSink,  # noqa: ANN001
                                resolve_timeout: str, resend_s: float, firing_s: float,
                                pace: Pace) -> None:
    am = RealAlertmanager(tmp_path, resolve_timeout, am_hook.url)
    app = None
    try:
        sim.set_state(num_requests_waiting=10)
        app = _start(tmp_path, sim, am, f"{int(resend_s)}s", pace)
        wait_for(am.active, 60, "the alert to reach Alertmanager")
        # Watch for `firing_s`: Alertmanager holds the alert the whole time and never
        # tells its own receivers it resolved.
        watched_until = time.monotonic() + firing_s
        polls = 0
        while time.monotonic() < watched_until:
            shown = am.active()
            assert shown, f"Alertmanager dropped the alert after {polls} polls"
            assert shown[0]["status"]["state"] == "active"
            assert not _resolved_by_am(am_hook), "Alertmanager sent a false 'resolved'"
            polls += 1
            time.sleep(pace.poll_s)  # poll interval of the watch window, not a wait for an event
        # Sentinel resolves it (the backlog clears) and Alertmanager follows on Sentinel's
        # word: its resolution ends the alert at the instant Sentinel recorded, not at the
        # endsAt of the last firing post (4 resend intervals ahead), which is all it would
        # have if it resolved by expiry. The waits are only for the events, as long as a
        # starved machine needs; what they find is checked on Sentinel's own clock.
        sim.set_state(num_requests_waiting=0)
        wait_for(lambda: not _firing(app), 60, "Sentinel to resolve the alert")
        resolved_ms = wait_for(lambda: _resolved_at_ms(app), 60, "the incident's resolution")
        wait_for(lambda: not am.active(), 4 * resend_s + 60, "Alertmanager to resolve it")
        notes = wait_for(lambda: _resolved_by_am(am_hook), 60,
                         "Alertmanager's resolved notification")
        ends = [a["endsAt"] for n in notes for a in n["alerts"]]  # type: ignore[attr-defined]
        assert [_rfc3339_ms(e) for e in ends] == [resolved_ms], (ends, resolved_ms)
    finally:
        if app is not None:
            app.stop(2)
        am.stop()


@pytest.mark.integration
def test_real_alertmanager_keeps_a_firing_alert_and_follows_its_resolution(
        tmp_path: Path, sim, am_hook: WebhookSink) -> None:  # noqa: ANN001
    """Resend 1 s, endsAt 4 s ahead; Alertmanager's resolve_timeout 1 s would expire an alert
    without endsAt at once. 12 s of firing is three endsAt windows."""
    _stays_firing_then_resolves(tmp_path, sim, am_hook, "1s", 1.0, 12.0, FAST)


@pytest.mark.integration
@pytest.mark.slow
def test_issue_figures_five_minutes_against_resolve_timeout_1m(
        tmp_path: Path, sim, am_hook: WebhookSink) -> None:  # noqa: ANN001
    """The issue's case: resolve_timeout 1m, Prometheus's 1 m resend interval, 5 min firing.

    In real time (Alertmanager reads endsAt against its own clock), with the issue's
    figures kept as they are: scaled down, this is the test above. What makes it cheap
    is SLOW's pace (scrapes every 5 s, a poll a second); the six minutes are spent waiting."""
    _stays_firing_then_resolves(tmp_path, sim, am_hook, "1m", 60.0, 300.0, SLOW)


def _alert(name: str, state: str, resolved_at: int | None = None) -> Alert:
    return Alert(group="g", rule=name, labels=labels_of({"alertname": name}), annotations=(),
                 state=AlertState(state), value=1.0, active_at_ms=T0, last_eval_ms=T0,
                 fired_at_ms=T0, resolved_at_ms=resolved_at)


def _entry(name: str, state: str, *, muted: str | None = None,
           resolved_at: int | None = None, pushed: bool = True) -> tuple[str, dict]:
    """A group entry whose last flush pushed it as it is (amfeed.py), unless `pushed` is off."""
    from sentinel.respond.notify.codec import alert_to_json

    alert = _alert(name, state, resolved_at)
    entry = {"alert": alert_to_json(alert), "incident_id": 0, "muted": muted}
    if pushed:
        entry["pushed"] = alert_to_json(alert)
    return alert.fingerprint, entry


@pytest.mark.parametrize("send_resolved", [True, False])
def test_resend_posts_what_the_last_flush_pushed(incident_db, loopback,  # noqa: ANN001
                                                        send_resolved: bool) -> None:
    """Firing → endsAt ahead; resolved → its end, unless send_resolved is off; muted
    since, or not pushed yet → left out; then nothing until the resend interval has
    passed."""
    from sentinel.incidents.convert import ms_to_dt
    from sentinel.incidents.models_notify import NotifyGroup
    from sentinel.respond.notify.alertmanager import AlertmanagerReceiver
    from sentinel.respond.notify.amresend import AlertmanagerResender

    entries = dict([_entry("Firing", "firing"), _entry("Muted", "firing", muted="silenced"),
                    _entry("Ended", "inactive", resolved_at=T0 + 5_000),
                    _entry("Waiting", "firing", pushed=False)])
    with incident_db.session() as s:
        s.add(NotifyGroup(key="0/am:{}", receiver="am", route="0", group_labels={},
                          alerts=entries, sent_firing=[], sent_resolved=[], seq=1,
                          created_at=ms_to_dt(T0), next_flush_at=ms_to_dt(T0 + 3_600_000),
                          last_sent_at=ms_to_dt(T0)))
    rx = AlertmanagerReceiver("am", loopback.url(""), send_resolved=send_resolved,
                              resend_interval_ms=60_000)
    resender = AlertmanagerResender(incident_db, [rx, object()])
    now = T0 + 10_000
    assert [r.ok for r in resender.run(now)["am"]] == [True]
    (request,) = loopback.accepted()
    posted = {a["labels"]["alertname"]: a["endsAt"] for a in request.json()}  # type: ignore[union-attr]
    expected = {"Firing": "2024-05-01T12:04:10Z"}
    if send_resolved:
        expected["Ended"] = "2024-05-01T12:00:05Z"
    assert posted == expected
    assert resender.run(now + 59_999) == {}
    assert len(resender.run(now + 60_000)["am"]) == 1
    assert len(loopback.accepted()) == 2
    rx.close()


def test_a_resolve_is_posted_at_once_and_a_failed_post_retried_soon(  # noqa: ANN001
        incident_db, loopback) -> None:
    """Issue 48: a resolve reached Alertmanager 90 s after Sentinel resolved it, and after
    an outage a queued resolve waited minutes more. A change the dispatcher took in goes at
    the next round (only the alerts that changed); a failed post is retried after RETRY_MS."""
    from sentinel.incidents.convert import ms_to_dt
    from sentinel.incidents.models_notify import NotifyGroup
    from sentinel.respond.notify.alertmanager import AlertmanagerReceiver
    from sentinel.respond.notify.amresend import RETRY_MS, AlertmanagerResender

    entries = dict([_entry("Crash", "firing"), _entry("Queue", "firing")])
    with incident_db.session() as s:
        s.add(NotifyGroup(key="0/am:{}", receiver="am", route="0", group_labels={},
                          alerts=entries, sent_firing=[], sent_resolved=[], seq=1,
                          created_at=ms_to_dt(T0), next_flush_at=ms_to_dt(T0 + 3_600_000),
                          last_sent_at=ms_to_dt(T0)))
    rx = AlertmanagerReceiver("am", loopback.url(""), resend_interval_ms=60_000)
    resender = AlertmanagerResender(incident_db, [rx])
    now = T0 + 10_000
    assert [r.ok for r in resender.run(now)["am"]] == [True]
    assert resender.run(now + 1_000, changed=True) == {}  # nothing changed: nothing posted

    def resolve(name: str, at: int) -> None:
        with incident_db.session() as s:
            g = s.query(NotifyGroup).one()
            g.alerts = {**g.alerts, **dict([_entry(name, "inactive", resolved_at=at)])}
    resolve("Crash", now + 2_000)
    resender.run(now + 2_000, changed=True)
    posted = loopback.accepted()[-1].json()
    assert [(a["labels"]["alertname"], a["endsAt"]) for a in posted] == [  # type: ignore[index]
        ("Crash", "2024-05-01T12:00:12Z")]
    loopback.status = 503  # Alertmanager goes away; the next change fails to reach it
    resolve("Queue", now + 3_000)
    assert [r.ok for r in resender.run(now + 3_000, changed=True)["am"]] == [False]
    loopback.status = 200
    assert resender.run(now + 3_000 + RETRY_MS - 1) == {}
    (result,) = resender.run(now + 3_000 + RETRY_MS)["am"]  # back: retried now, not in 1 min
    assert result.ok
    names = {a["labels"]["alertname"]: a["endsAt"]
             for a in loopback.accepted()[-1].json()}  # type: ignore[union-attr]
    assert names["Queue"] == "2024-05-01T12:00:13Z"
    rx.close()
