"""Build the receivers a config names. Until routing exists every alert goes to every receiver."""

from __future__ import annotations

from sentinel.config import Config
from sentinel.respond.notify.base import Receiver
from sentinel.respond.notify.webhook import WebhookReceiver


def build_receivers(config: Config) -> list[Receiver]:
    """One receiver object per configured receiver, in config order."""
    out: list[Receiver] = []
    for rc in config.receivers:
        if rc.webhook is not None:
            out.append(WebhookReceiver.from_config(rc.name, rc.webhook, config.external_url))
    return out
