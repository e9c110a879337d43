"""Configuration of the notify stage: receivers (one section per kind), routes, inhibition.

    receivers:            # top-level, each with a name and exactly one kind
      - name: oncall
        webhook | slack | pagerduty | alertmanager: {...}
    notify:
      route: {receiver, group_by, group_wait, group_interval, repeat_interval,
              matchers, continue, routes: [...]}
      inhibit_rules: [{source_matchers, target_matchers, equal}]
      fallback_receiver: pager   # paged when a delivery fails for good or remediation gives up
      watchdog: true             # an always-firing Watchdog alert (a dead man's switch)
      act_first: {grace: 2m, receiver: chat}   # act first, then tell once (issue 33)
      join_window: 10m           # one failure, one incident: how long a target's alerts join

Secrets (URLs with tokens, routing keys, HMAC secrets, header values) may be
given inline (usually `${VAR}`) or as `*_file`; `secrets()` lists them for the
Redactor. Matchers are parsed at load time, never at first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sentinel.config.base import (
    Duration,
    PositiveDuration,
    Strict,
    http_url,
    problem,
    unreadable,
)
from sentinel.respond.notify.matchers import parse_matchers
from sentinel.secrets import read_secret_file, url_secret_parts

DEFAULT_WEBHOOK_TIMEOUT_MS = 10_000
PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
DEFAULT_SIGNATURE_HEADER = "X-Sentinel-Signature"
_NAME = r"^[a-zA-Z0-9_.-]+$"
_HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
# Alertmanager's defaults for a configured route.
DEFAULT_GROUP_WAIT_MS = 30_000
DEFAULT_GROUP_INTERVAL_MS = 5 * 60_000
DEFAULT_REPEAT_INTERVAL_MS = 4 * 3600_000
# Prometheus's notifier re-sends firing alerts to Alertmanager every minute.
DEFAULT_RESEND_INTERVAL_MS = 60_000


def read_file_field(data: Any, info: ValidationInfo, key: str, *, required: bool) -> Any:
    """`key` from `key_file` when that is given (relative to the config's folder); one of both."""
    if not isinstance(data, dict):
        return data
    has_value, file_ = bool(data.get(key)), data.get(f"{key}_file")
    if has_value and file_ is not None:
        raise problem(f"set either {key} or {key}_file, not both", f"{key}_file")
    if file_ is None:
        if required and not has_value:
            raise problem(f"{key} or {key}_file is required", key)
        return data
    if not isinstance(file_, str):
        return data  # the field's type check reports it
    path = Path(file_)
    if not path.is_absolute():
        path = Path((info.context or {}).get("config_dir", ".")) / path
    try:
        content = read_secret_file(path)
    except OSError as exc:
        raise problem(unreadable(path, exc), f"{key}_file") from None
    return {**data, key: content}


def _check_headers(v: dict[str, str]) -> dict[str, str]:
    import re

    for name, value in v.items():
        if not re.match(_HEADER_NAME, name):
            raise problem("not a valid HTTP header name", name)
        if "\n" in value or "\r" in value:
            raise problem("header values must not contain newlines", name)
    return v


class _HttpReceiver(Strict):
    timeout_ms: PositiveDuration = Field(DEFAULT_WEBHOOK_TIMEOUT_MS, alias="timeout")
    send_resolved: bool = True


class WebhookConfig(_HttpReceiver):
    """A generic webhook receiving Alertmanager's JSON payload (version 4).

    With `hmac_secret`, each request carries `X-Sentinel-Signature:
    sha256=<hex HMAC-SHA256 of the body>` (header name configurable).
    """

    url: str = Field("", repr=False)  # secret: tokens live in webhook URLs
    url_file: str | None = None
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    hmac_secret: str = Field("", repr=False)
    hmac_secret_file: str | None = None
    signature_header: str = Field(DEFAULT_SIGNATURE_HEADER, pattern=_HEADER_NAME)

    @model_validator(mode="before")
    @classmethod
    def _read_files(cls, data: Any, info: ValidationInfo) -> Any:
        data = read_file_field(data, info, "url", required=True)
        return read_file_field(data, info, "hmac_secret", required=False)

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        return http_url(v, what="webhook URL")

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        return _check_headers(v)


class SlackConfig(_HttpReceiver):
    """A Slack incoming webhook (hooks.slack.com/services/T…/B…/…); the URL is the secret."""

    url: str = Field("", repr=False)
    url_file: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _read_files(cls, data: Any, info: ValidationInfo) -> Any:
        return read_file_field(data, info, "url", required=True)

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        return http_url(v, what="Slack webhook URL")


class PagerDutyConfig(_HttpReceiver):
    """PagerDuty Events API v2: trigger and resolve with a stable dedup_key per group."""

    routing_key: str = Field("", repr=False)
    routing_key_file: str | None = None
    url: str = PAGERDUTY_EVENTS_URL
    # Alert `severity` label -> PagerDuty severity (critical, error, warning, info).
    severity_map: dict[str, str] = Field(default_factory=lambda: {
        "critical": "critical", "page": "critical", "error": "error",
        "warning": "warning", "info": "info"})
    default_severity: str = "error"

    @model_validator(mode="before")
    @classmethod
    def _read_files(cls, data: Any, info: ValidationInfo) -> Any:
        return read_file_field(data, info, "routing_key", required=True)

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        return http_url(v, what="PagerDuty events URL")

    @field_validator("default_severity")
    @classmethod
    def _check_default(cls, v: str) -> str:
        return _pd_severity(v)

    @field_validator("severity_map")
    @classmethod
    def _check_map(cls, v: dict[str, str]) -> dict[str, str]:
        for k, sev in v.items():
            try:
                _pd_severity(sev)
            except Exception:
                raise problem("PagerDuty severity must be critical, error, warning or info",
                              k) from None
        return v


def _pd_severity(v: str) -> str:
    if v not in ("critical", "error", "warning", "info"):
        raise problem("PagerDuty severity must be critical, error, warning or info")
    return v


class AlertmanagerConfig(_HttpReceiver):
    """An existing Alertmanager: alerts are pushed to `<url>/api/v2/alerts`.

    Firing alerts are re-sent every `resend_interval` with endsAt = now + 4 x
    that interval, as Prometheus's notifier does, so Alertmanager never expires
    (resolves) an alert that Sentinel still has firing.
    """

    url: str = Field(repr=False)
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    resend_interval_ms: PositiveDuration = Field(DEFAULT_RESEND_INTERVAL_MS,
                                                 alias="resend_interval")

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        return http_url(v, what="Alertmanager URL").rstrip("/")

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        return _check_headers(v)


RECEIVER_KINDS = ("webhook", "slack", "pagerduty", "alertmanager")


class ReceiverConfig(Strict):
    """A named destination for notifications with exactly one kind."""

    name: str = Field(pattern=_NAME)
    webhook: WebhookConfig | None = None
    slack: SlackConfig | None = None
    pagerduty: PagerDutyConfig | None = None
    alertmanager: AlertmanagerConfig | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ReceiverConfig:
        kinds = [k for k in RECEIVER_KINDS if getattr(self, k) is not None]
        if not kinds:
            raise problem("receiver has no kind: add one of " + ", ".join(RECEIVER_KINDS))
        if len(kinds) > 1:
            raise problem(f"receiver has several kinds ({', '.join(kinds)}): give each its own "
                          "receiver")
        return self

    def secrets(self) -> list[str]:
        """This receiver's secret values, for the Redactor."""
        out: list[str] = []
        if self.webhook is not None:
            out += url_secret_parts(self.webhook.url) + list(self.webhook.headers.values())
            out += [self.webhook.hmac_secret]
        if self.slack is not None:
            out += url_secret_parts(self.slack.url)
        if self.pagerduty is not None:
            out += [self.pagerduty.routing_key]
        if self.alertmanager is not None:
            out += url_secret_parts(self.alertmanager.url)
            out += list(self.alertmanager.headers.values())
        return [s for s in out if s]


def _matchers(v: tuple[str, ...]) -> tuple[str, ...]:
    for i, text in enumerate(v):
        try:
            parse_matchers([text])
        except ValueError as exc:
            raise problem(str(exc), i) from None
    return v


class RouteConfig(Strict):
    """A node of the routing tree; unset fields are inherited from the parent (as Alertmanager)."""

    receiver: str | None = None
    matchers: tuple[str, ...] = ()
    group_by: tuple[str, ...] | None = None
    group_wait_ms: Duration | None = Field(None, alias="group_wait")
    group_interval_ms: Duration | None = Field(None, alias="group_interval")
    repeat_interval_ms: PositiveDuration | None = Field(None, alias="repeat_interval")
    continue_: bool = Field(False, alias="continue")
    # Names from the top-level `time_intervals` (Alertmanager's keys, not inherited): no
    # notifications while one of the mute ones is active, or while none of the active ones is.
    mute_time_intervals: tuple[str, ...] = ()
    active_time_intervals: tuple[str, ...] = ()
    routes: tuple[RouteConfig, ...] = ()

    @field_validator("matchers")
    @classmethod
    def _check_matchers(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return _matchers(v)

    def time_interval_names(self, path: tuple[str | int, ...] = ()
                            ) -> list[tuple[str, tuple[str | int, ...]]]:
        """Every time interval this subtree names, with where (for the error's key)."""
        own = [(name, (*path, key, i)) for key in ("mute_time_intervals", "active_time_intervals")
               for i, name in enumerate(getattr(self, key))]
        return own + [n for j, child in enumerate(self.routes)
                      for n in child.time_interval_names((*path, "routes", j))]

    def receivers(self) -> list[str]:
        """Every receiver this subtree names."""
        own = [self.receiver] if self.receiver else []
        return own + [r for child in self.routes for r in child.receivers()]


class InhibitRuleConfig(Strict):
    """Alerts matching `target_matchers` are muted while one matching `source_matchers` fires
    with the same values of the `equal` labels."""

    source_matchers: tuple[str, ...]
    target_matchers: tuple[str, ...]
    equal: tuple[str, ...] = ()

    @field_validator("source_matchers", "target_matchers")
    @classmethod
    def _check_matchers(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return _matchers(v)


# Shipped inhibitions (issue 33): one failure, one page. Set `notify.inhibit_rules` to
# replace them (`[]` turns them off). The rules' alert names are rules/vllm.yaml's.
_SERVING = ("VLLMHealthCheckFailing|VLLMEngineStalled|VLLMTimeToFirstTokenHigh|"
            "VLLMInterTokenLatencyHigh|VLLMQueueTimeHigh|VLLMRequestsQueued|"
            "VLLMRequestErrorsHigh|VLLMPreemptionStorm|VLLMKVCacheNearlyFull")
_LATENCY = "VLLMTimeToFirstTokenHigh|VLLMInterTokenLatencyHigh|VLLMQueueTimeHigh"


def default_inhibit_rules() -> tuple[InhibitRuleConfig, ...]:
    """The inhibitions Sentinel ships, each with the reason it exists."""
    return (
        # A server that does not answer its scrapes serves nothing: its health, stall,
        # latency, queue and error alerts only repeat that it is down.
        InhibitRuleConfig(source_matchers=('alertname="VLLMTargetDown"',),
                          target_matchers=(f'alertname=~"{_SERVING}"',), equal=("target",)),
        # A stalled engine makes every request slow: its latency alerts are the stall.
        InhibitRuleConfig(source_matchers=('alertname="VLLMEngineStalled"',),
                          target_matchers=(f'alertname=~"{_LATENCY}"',), equal=("target",)),
    )


# Act first, then tell once (issue 33): the longest a page waits while a policy acts.
DEFAULT_ACT_FIRST_GRACE_MS = 2 * 60_000
# One incident per failure: a failure alert joins its target's incident opened this recently.
DEFAULT_JOIN_WINDOW_MS = 10 * 60_000


class ActFirstConfig(Strict):
    """While a remediation policy acts on a new incident, its first page waits.

    The wait is the acting policy's first step `timeout` + `verify_deadline`, never
    longer than `grace`. A verified recovery within it pages nobody: one message goes
    to `receiver` (a chat channel, not the pager) saying what broke, what Sentinel did
    and how long serving was away. Without `receiver` no message is sent at all; the
    incident's timeline alone records the fix. Anything else (refused, failed, parked
    for approval, not verified in time) pages at once. `grace: 0s` turns waiting off.
    """

    grace_ms: Duration = Field(DEFAULT_ACT_FIRST_GRACE_MS, alias="grace")
    receiver: str | None = None


class NotifyConfig(Strict):
    """Routing, grouping, inhibition, escalation and delivery settings."""

    route: RouteConfig | None = None
    inhibit_rules: tuple[InhibitRuleConfig, ...] = Field(default_factory=default_inhibit_rules)
    fallback_receiver: str | None = None
    watchdog: bool = False
    act_first: ActFirstConfig = Field(default_factory=lambda: ActFirstConfig.model_validate({}))
    # Long enough for a warm restart that is verified (seconds) or fails (minutes) to raise
    # its down and health alerts; short enough that tomorrow's crash is its own incident.
    join_window_ms: Duration = Field(DEFAULT_JOIN_WINDOW_MS, alias="join_window")
    # How often the dispatcher and sender run (they also run right after an evaluation).
    interval_ms: PositiveDuration = Field(1_000, alias="interval")
    retry_initial_ms: PositiveDuration = Field(1_000, alias="retry_initial")
    retry_max_ms: PositiveDuration = Field(5 * 60_000, alias="retry_max")
    # A message retried this long is given up (and escalated): long enough for
    # a receiver that is down for an hour to get everything when it is back.
    give_up_after_ms: PositiveDuration = Field(24 * 3600_000, alias="give_up_after")


def check_receiver_names(notify: NotifyConfig, receivers: tuple[ReceiverConfig, ...]) -> None:
    """Every receiver the notify section names exists; raises a problem at the first missing."""
    names = {r.name for r in receivers}
    if notify.fallback_receiver is not None and notify.fallback_receiver not in names:
        raise problem(f"unknown receiver {notify.fallback_receiver!r}", "notify",
                      "fallback_receiver")
    if notify.act_first.receiver is not None and notify.act_first.receiver not in names:
        raise problem(f"unknown receiver {notify.act_first.receiver!r}", "notify", "act_first",
                      "receiver")
    if notify.route is not None:
        if notify.route.receiver is None:
            raise problem("the root route needs a receiver", "notify", "route", "receiver")
        for name in notify.route.receivers():
            if name not in names:
                raise problem(f"unknown receiver {name!r}", "notify", "route")
