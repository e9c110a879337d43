"""Plain data passed between pipeline stages.

collect ──► store ──► rules ──► incidents ──► respond

Every stage speaks in these types and nothing else: a sample is a labelled
value at a time; a rule evaluation yields `Alert` snapshots; incidents turn
alert transitions into `Notification`s. Times are integer milliseconds since
the Unix epoch (`*_ms`), as Prometheus stores them, so rule results compare
exactly with promtool's.
"""

from __future__ import annotations

import enum
import functools
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# A label set: (name, value) pairs sorted by name, metric name under
# "__name__". A tuple so it hashes and compares cheaply as a dict key.
Labels = tuple[tuple[str, str], ...]

METRIC_NAME = "__name__"

# Prometheus marks a series that vanished from a scrape with this exact NaN
# (value.StaleNaN); an ordinary NaN sample is a real value and is kept.
STALE_NAN_BITS = 0x7FF0000000000002
STALE_NAN: float = struct.unpack("<d", struct.pack("<Q", STALE_NAN_BITS))[0]


def is_stale(value: float) -> bool:
    """True for Prometheus's staleness marker, not for other NaNs."""
    return math.isnan(value) and struct.pack("<d", value) == struct.pack("<Q", STALE_NAN_BITS)


def labels_of(mapping: Mapping[str, str] | Iterable[tuple[str, str]]) -> Labels:
    """Canonical label set: sorted by name, empty values dropped (as Prometheus does)."""
    items = mapping.items() if isinstance(mapping, Mapping) else mapping
    return tuple(sorted((k, v) for k, v in items if v != ""))


def label_value(labels: Labels, name: str, default: str = "") -> str:
    """The value of one label, or `default` when the set lacks it."""
    for k, v in labels:
        if k == name:
            return v
    return default


def labels_without(labels: Labels, *names: str) -> Labels:
    """The label set with the named labels removed."""
    return tuple(kv for kv in labels if kv[0] not in names)


def format_labels(labels: Labels) -> str:
    """`name{a="b", c="d"}` as Prometheus prints a series."""
    name = label_value(labels, METRIC_NAME)
    rest = ", ".join(f'{k}="{_escape(v)}"' for k, v in labels if k != METRIC_NAME)
    return f"{name}{{{rest}}}" if rest or not name else name


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_SEP = 0xFF


@functools.lru_cache(maxsize=1 << 15)
def fingerprint(labels: Labels) -> str:
    """Alertmanager's fingerprint of a label set: FNV-1a 64 over sorted pairs, 16 hex digits.

    Matches prometheus/common model.LabelSet.Fingerprint so receivers that
    de-duplicate on it see the same value Alertmanager would send. Cached: the
    same alerts are fingerprinted at every evaluation and by every stage, and
    the hash walks every byte in Python (~20 µs a label set; issue 49: 5,000
    alerts each evaluation, several times each).
    """
    h = _FNV_OFFSET
    for name, value in sorted(labels):
        for b in name.encode():
            h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
        h = ((h ^ _SEP) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
        for b in value.encode():
            h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
        h = ((h ^ _SEP) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


@dataclass(frozen=True, slots=True)
class InstantSample:
    """One element of an instant vector: a series' labels and its value at the query time."""

    labels: Labels
    value: float


Vector = list[InstantSample]


class AlertState(enum.StrEnum):
    """Alert states as in Prometheus's rules/alerting.go."""

    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert instance of an alerting rule, as of one evaluation.

    A rule evaluation yields one per active label set, plus one in state
    INACTIVE with `resolved_at_ms` set for each alert that resolved in that
    evaluation. The same type is persisted and handed back to the rule engine
    on start, so `for` and `keep_firing_for` survive a restart.
    """

    group: str
    rule: str
    labels: Labels  # the result's labels, the rule's labels and alertname
    annotations: Labels
    state: AlertState
    value: float
    active_at_ms: int
    last_eval_ms: int
    fired_at_ms: int | None = None
    resolved_at_ms: int | None = None
    keep_firing_since_ms: int | None = None

    @property
    def fingerprint(self) -> str:
        """Alertmanager's fingerprint of the alert's labels."""
        return fingerprint(self.labels)

    @property
    def name(self) -> str:
        """The alertname label."""
        return label_value(self.labels, "alertname", self.rule)


class NotificationKind(enum.StrEnum):
    """Whether a notification announces alerts that fire or that resolved."""

    FIRING = "firing"
    RESOLVED = "resolved"
    # More about alerts already announced firing (the model's runbook after the page):
    # receivers thread it under the same group key (issue 33).
    UPDATE = "update"
    # Sentinel fixed the failure before anyone was paged (act first, then tell once): a
    # kind of its own, so a receiver's `send_resolved: false` does not drop it (issue 48).
    FIXED = "fixed"


@dataclass(frozen=True, slots=True)
class Notification:
    """What the incident stage asks the notify stage to deliver."""

    incident_id: int
    kind: NotificationKind
    alerts: tuple[Alert, ...]
    group_labels: Labels = field(default_factory=tuple)
    # Set by the notify stage's grouping: the aggregation group (stable for its
    # life; PagerDuty's dedup_key derives from it), the key that is the same on
    # every delivery attempt of one message, and each alert's incident.
    group_key: str = ""
    idempotency_key: str = ""
    incident_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One log line (or one Cloud Logging entry's text) from a log source, for a target."""

    target: str
    source: str  # e.g. "file:/var/log/vllm.log", "cloud-logging", "docker:vllm", "journal:vllm"
    t_ms: int  # when the line was written, as the source says; else when it was read
    text: str
    line_no: int | None = None  # position in a file, where the source has one
    insert_id: str | None = None  # Cloud Logging's insertId, for de-duplication


@dataclass(frozen=True, slots=True)
class LogEvent:
    """A crash signature matched in a log: what, where, when, and the excerpt that shows it."""

    target: str
    source: str
    signature: str
    category: str
    severity: str
    t_ms: int
    line_no: int | None
    excerpt: tuple[str, ...]  # context before, the matched line(s), context after
    runbook: str = ""
