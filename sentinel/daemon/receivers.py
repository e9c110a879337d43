"""Build the receivers a config names, one object per configured receiver."""

from __future__ import annotations

from sentinel.config import Config
from sentinel.config.notify import ReceiverConfig
from sentinel.respond.notify.alertmanager import AlertmanagerReceiver
from sentinel.respond.notify.base import Receiver
from sentinel.respond.notify.pagerduty import PagerDutyReceiver
from sentinel.respond.notify.slack import SlackReceiver
from sentinel.respond.notify.webhook import WebhookReceiver


def build_receiver(rc: ReceiverConfig, external_url: str) -> Receiver:
    """The receiver object for one config entry (its one kind)."""
    if rc.webhook is not None:
        return WebhookReceiver.from_config(rc.name, rc.webhook, external_url)
    if rc.slack is not None:
        return SlackReceiver.from_config(rc.name, rc.slack, external_url)
    if rc.pagerduty is not None:
        return PagerDutyReceiver.from_config(rc.name, rc.pagerduty, external_url)
    assert rc.alertmanager is not None
    return AlertmanagerReceiver.from_config(rc.name, rc.alertmanager, external_url)


def build_receivers(config: Config) -> list[Receiver]:
    """One receiver object per configured receiver, in config order."""
    return [build_receiver(rc, config.external_url) for rc in config.receivers]


def receiver_timeouts_ms(config: Config) -> dict[str, int]:
    """Each receiver's request timeout: the sender's lease must outlast it."""
    out: dict[str, int] = {}
    for rc in config.receivers:
        kind = rc.webhook or rc.slack or rc.pagerduty or rc.alertmanager
        assert kind is not None
        out[rc.name] = kind.timeout_ms
    return out


def send_resolved(config: Config) -> dict[str, bool]:
    """Each receiver's send_resolved setting, for the dispatcher."""
    out: dict[str, bool] = {}
    for rc in config.receivers:
        kind = rc.webhook or rc.slack or rc.pagerduty or rc.alertmanager
        assert kind is not None
        out[rc.name] = kind.send_resolved
    return out
