"""What a fleet incident's page says (pure): what, how many, where, and the members.

`fleet_alert` is the one alert a fleet incident's messages carry: `summary`
says what and how many (`VLLMKVCacheHigh on 4,812 of 5,000 targets: pool=a100:
3,900, pool=h100: 912`), `description` names the members (bounded), `example`
is a member's own summary, `sentinel_remediation` why nothing is restarted
target by target, and `fleet_count`/`fleet_size` the numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sentinel.incidents.fleet import FLEET_WIDE_WHY, Kind, Message
from sentinel.model import Alert, AlertState, Labels, label_value, labels_of

# The page's annotation that says why nothing was remediated, as act-first's does.
REMEDIATION = "sentinel_remediation"


@dataclass(frozen=True, slots=True)
class Page:
    """What the page is about: the fleet alert's labels and where it came from."""

    name: str
    labels: Labels
    where: str  # the group (`pool=a100`), empty for the whole fleet
    rule_group: str
    active_at_ms: int
    opened_ms: int
    example: str = ""


def fleet_alert(p: Page, m: Message, firing: frozenset[str],
                labels_by_target: Mapping[str, Mapping[str, str]],
                breakdown_by: tuple[str, ...], list_limit: int, now_ms: int) -> Alert:
    """The fleet alert as message `m` shows it (firing, or resolved for the resolve)."""
    resolved = m.kind is Kind.RESOLVED
    text = headline(p.name, m.count, m.size, p.where)
    parts = breakdown({t: labels_by_target.get(t, {}) for t in firing}, breakdown_by)
    summary = f"{text}: {parts}" if parts else text
    if resolved:
        summary = f"{p.name}: every target of the fleet incident recovered"
    annotations = {"summary": summary, REMEDIATION: FLEET_WIDE_WHY,
                   "fleet_count": str(m.count), "fleet_size": str(m.size)}
    if firing:
        annotations["description"] = f"firing on: {listing(firing, list_limit)}"
    if p.example:
        annotations["example"] = p.example
    return Alert(group=p.rule_group, rule=p.name, labels=p.labels,
                 annotations=labels_of(annotations),
                 state=AlertState.INACTIVE if resolved else AlertState.FIRING,
                 value=float(m.count), active_at_ms=p.active_at_ms, last_eval_ms=now_ms,
                 fired_at_ms=p.opened_ms or now_ms, resolved_at_ms=now_ms if resolved else None)


def where(labels: Labels, label: str) -> str:
    """The group a fleet alert's `fleet` label names (`<alert>/<group>`), empty for `all`."""
    group = label_value(labels, label).split("/", 1)[-1]
    return "" if group == "all" else group


def headline(what: str, count: int, size: int, group: str) -> str:
    """`KV cache over 85 % on 4,812 of 5,000 targets (pool=a100)`."""
    of = f" of {size:,}" if size > 0 else ""
    noun = "target" if count == 1 and size <= 1 else "targets"
    place = f" ({group})" if group else ""
    return f"{what} on {count:,}{of} {noun}{place}"


def breakdown(labels_by_target: Mapping[str, Mapping[str, str]], keys: tuple[str, ...],
              limit: int = 10) -> str:
    """`pool=a100: 3,900, pool=h100: 912`: the members counted by each label's value."""
    parts: list[str] = []
    for key, counts in breakdown_counts(labels_by_target, keys).items():
        ranked = list(counts.items())
        parts += [f"{key}={v}: {n:,}" for v, n in ranked[:limit]]
        if len(ranked) > limit:
            parts.append(f"{key}: {len(ranked) - limit} more values")
    return ", ".join(parts)


def breakdown_counts(labels_by_target: Mapping[str, Mapping[str, str]],
                     keys: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """{label: {value: members}}, the most members first (the API's `breakdown`)."""
    out: dict[str, dict[str, int]] = {}
    for key in keys:
        counts: dict[str, int] = {}
        for labels in labels_by_target.values():
            value = labels.get(key)
            if value:
                counts[value] = counts.get(value, 0) + 1
        out[key] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return out


def listing(targets: frozenset[str] | set[str], limit: int) -> str:
    """The members named on the page, bounded: `t1, t2, … and 4,790 more`."""
    names = sorted(targets)
    shown = ", ".join(names[:limit])
    rest = len(names) - limit
    return f"{shown}, and {rest:,} more" if rest > 0 else shown
