"""What alerts are grouped by into incidents: alertname and target (issue 49 moved it here
from tracker.py so the batched opening path, opening.py, can share it without a circle)."""

from __future__ import annotations

from dataclasses import dataclass

from sentinel.model import Alert, Labels, label_value


@dataclass(frozen=True, slots=True)
class GroupKey:
    """What alerts are grouped by: one open incident per key."""

    alertname: str
    target: str

    @property
    def text(self) -> str:
        """The stored group key; alert names cannot contain '/', so it is unambiguous."""
        return f"{self.alertname}/{self.target}"

    @property
    def labels(self) -> Labels:
        """The key as the notification's group labels."""
        return tuple(sorted((k, v) for k, v in (("alertname", self.alertname),
                                                ("target", self.target)) if v))


def group_key(alert: Alert) -> GroupKey:
    """The incident key of an alert: alertname and target (or instance) label."""
    target = label_value(alert.labels, "target") or label_value(alert.labels, "instance")
    return GroupKey(alert.name, target)
