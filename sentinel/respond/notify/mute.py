"""Whether an alert is muted, and why: silences and inhibition rules (pure decisions).

A silence mutes alerts matching all its matchers between its start and end.
An inhibition rule mutes alerts matching `target` while another firing alert
matches `source` with equal values of the `equal` labels (an alert never
inhibits itself), e.g. TargetDown on gemma mutes gemma's other alerts.
The reason is a sentence for the incident timeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sentinel.model import Labels, fingerprint, format_labels, label_value
from sentinel.respond.notify.matchers import Matcher, matches_all, parse_matchers

if TYPE_CHECKING:
    # only a type here: `silence list` must not build the notify section's pydantic models
    from sentinel.config.notify import InhibitRuleConfig


@dataclass(frozen=True, slots=True)
class Silence:
    """An active silence as the dispatcher sees it."""

    id: int
    matchers: tuple[Matcher, ...]
    starts_at_ms: int
    ends_at_ms: int
    created_by: str
    comment: str

    def active(self, now_ms: int) -> bool:
        """In force now: started, not yet ended."""
        return self.starts_at_ms <= now_ms < self.ends_at_ms


@dataclass(frozen=True, slots=True)
class InhibitRule:
    """A parsed inhibition rule."""

    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...]

    @classmethod
    def from_config(cls, cfg: InhibitRuleConfig) -> InhibitRule:
        """Parse the config's matcher strings (validated at load)."""
        return cls(parse_matchers(cfg.source_matchers), parse_matchers(cfg.target_matchers),
                   cfg.equal)


@dataclass(frozen=True, slots=True)
class MuteReason:
    """Why an alert sends nothing: the sentence, and what muted it (for the timeline's data)."""

    text: str
    silence_id: int | None = None
    inhibited_by: str | None = None  # fingerprint of the source alert


def silenced_by(labels: Labels, silences: Iterable[Silence], now_ms: int) -> MuteReason | None:
    """The first active silence matching the labels, as a reason."""
    for s in silences:
        if s.active(now_ms) and matches_all(s.matchers, labels):
            who = f" by {s.created_by}" if s.created_by else ""
            why = f": {s.comment}" if s.comment else ""
            return MuteReason(f"silenced by silence {s.id}{who}{why}", silence_id=s.id)
    return None


def inhibited_by(labels: Labels, rules: Sequence[InhibitRule],
                 firing: Sequence[Labels]) -> MuteReason | None:
    """The first firing alert that inhibits one with these labels, as a reason."""
    own = fingerprint(labels)
    for rule in rules:
        if not matches_all(rule.target, labels):
            continue
        for source in firing:
            if fingerprint(source) == own or not matches_all(rule.source, source):
                continue
            if all(label_value(source, n) == label_value(labels, n) for n in rule.equal):
                name = label_value(source, "alertname")
                return MuteReason(f"inhibited by {name} {format_labels(source)}",
                                  inhibited_by=fingerprint(source))
    return None


class InhibitionSources:
    """One run's inhibition sources (labels and incident of every firing alert), indexed
    per rule by the values of its `equal` labels.

    `inhibited_by` over the whole list, once per alert, made a storm's flush quadratic
    (5,000 alerts, each checked against 5,000 sources: issue 49); here an alert looks at
    the sources that share its `equal` values only. The answer is `inhibited_by`'s: the
    first source in the given order, rule by rule.
    """

    def __init__(self, rules: Sequence[InhibitRule],
                 sources: Sequence[tuple[Labels, int]]) -> None:
        self._rules: list[tuple[InhibitRule, dict[tuple[str, ...],
                                                  list[tuple[Labels, str, int]]]]] = []
        for rule in rules:
            index: dict[tuple[str, ...], list[tuple[Labels, str, int]]] = {}
            for labels, incident_id in sources:
                if matches_all(rule.source, labels):
                    key = tuple(label_value(labels, n) for n in rule.equal)
                    index.setdefault(key, []).append((labels, fingerprint(labels), incident_id))
            self._rules.append((rule, index))

    def inhibited_by(self, labels: Labels, of: Callable[[int], bool] = lambda _: True
                     ) -> MuteReason | None:
        """`inhibited_by(labels, rules, [sources whose incident `of` accepts])`."""
        own = fingerprint(labels)
        for rule, index in self._rules:
            if not matches_all(rule.target, labels):
                continue
            for source, fp, incident_id in index.get(
                    tuple(label_value(labels, n) for n in rule.equal), ()):
                if fp != own and of(incident_id):
                    name = label_value(source, "alertname")
                    return MuteReason(f"inhibited by {name} {format_labels(source)}",
                                      inhibited_by=fp)
        return None


def mute_reason(labels: Labels, silences: Sequence[Silence], rules: Sequence[InhibitRule],
                firing: Sequence[Labels], now_ms: int) -> MuteReason | None:
    """Silenced first (a person said so), then inhibited; None when the alert may be sent."""
    return silenced_by(labels, silences, now_ms) or inhibited_by(labels, rules, firing)
