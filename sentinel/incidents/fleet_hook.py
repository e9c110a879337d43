"""The I/O around the fleet decisions (fleet.py): rows, timeline lines, the page's text.

`IncidentTracker.process` calls `FleetCorrelator.correlate` in its transaction,
after the per-target incidents of the evaluation were recorded and before their
notifications are written. It groups the evaluation's alerts by (alert name,
group), asks `fleet.step` what each group's evaluation means, and:

- opens the fleet incident (group key `fleet/<alert>/<group>`, no target, no alert
  rows of its own: its members' rows are the evidence) and links every member's
  own incident in `fleet_members`, with a line on each saying why it pages nothing;
- returns the member incidents that page nothing of their own (`quiet`: those
  opened as part of the fleet; one that paged before keeps its page and resolve),
  and the fleet incident's own news (its page, the count, its resolve) for the
  tracker to write through the same outbox as every incident;
- writes a later count, when the route's group_interval allows, as an update to
  the groups that sent the page (as the model's runbook after a page: same group
  key, so receivers thread it).

The state is staged during the call and kept only once the tracker committed
(`committed`); a failed transaction leaves the last committed state. After a
restart it is read back from the open fleet incidents and their members.
`offered` is the remediation guard (fleet.remediation) applied to an evaluation.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from sentinel.config.notify import DEFAULT_GROUP_INTERVAL_MS
from sentinel.incidents import fleet, fleet_page
from sentinel.incidents.convert import dt_to_ms, labels_from_json, labels_to_json, ms_to_dt
from sentinel.incidents.fleet_targets import FleetTargets
from sentinel.incidents.models import Incident, IncidentStatus, TimelineEvent, TimelineKind
from sentinel.incidents.models_fleet import FleetMember
from sentinel.incidents.models_notify import NotifyGroup
from sentinel.model import (
    Alert,
    AlertState,
    Labels,
    Notification,
    NotificationKind,
    label_value,
    labels_of,
)
from sentinel.respond.notify.routing import Route, match_routes

log = logging.getLogger(__name__)

KEY_PREFIX = "fleet/"
# On the fleet alert: `<alert>/<group>` (`all`: the whole fleet), so the implicit route
# (grouped by target and fleet) sends each fleet incident as a message of its own.
FLEET_LABEL = "fleet"
_Key = tuple[str, Labels]  # (alert name, group labels)
BREAKDOWN_KEPT = 50  # values per label kept on a timeline line (the most members first)


class UpdateWriter(Protocol):
    """Where an update to a sent page goes (notify's Outbox.add_message)."""

    def add_message(self, s: Session, receiver: str, notification: Notification,
                    now_ms: int) -> Any:
        """One message for one receiver, due now, in session `s`."""
        ...


@dataclass(frozen=True, slots=True)
class FleetNews:
    """What the fleet incident announces in this evaluation (the tracker writes it)."""

    incident_id: int
    alertname: str
    fired: tuple[Alert, ...] = ()
    resolved: tuple[Alert, ...] = ()
    closed: bool = False
    paged: bool = False  # the fleet incident's one page (a later runbook updates it)


@dataclass(frozen=True, slots=True)
class Correlated:
    """The member incidents that page nothing of their own, and the fleet incidents' news."""

    quiet: frozenset[int] = frozenset()
    news: tuple[FleetNews, ...] = ()


@dataclass(frozen=True, slots=True)
class _Group:
    """One (alert, group): the decision state and its fleet incident, if open."""

    state: fleet.FleetState = fleet.FleetState()
    incident_id: int = 0
    labels: Labels = ()  # the fleet alert's labels (alertname, fleet, severity, group)
    rule_group: str = "fleet"
    active_at_ms: int = 0
    opened_ms: int = 0  # the fleet alert's startsAt, the same on every message
    example: str = ""  # the first member's own summary, shown on the page


@dataclass(slots=True)
class _Seen:
    """One evaluation of one (alert, group), gathered from its alerts."""

    fired: set[str] = field(default_factory=set)
    resolved: set[str] = field(default_factory=set)
    active: dict[str, int] = field(default_factory=dict)
    first: Alert | None = None


class FleetCorrelator:
    """Fleet-wide failures: one incident, one page, no target-by-target remediation."""

    def __init__(self, policy: fleet.FleetPolicy, *,
                 target_labels: Mapping[str, Mapping[str, str]] | None = None,
                 route: Route | None = None, updates: UpdateWriter | None = None,
                 breakdown_by: tuple[str, ...] = ()) -> None:
        self.policy = policy
        # Every target's labels and each group's size; discovery and reloads keep it
        # current (daemon/fleetwiring.py).
        self.targets = FleetTargets(policy.group_by, target_labels)
        self._route = route
        self._updates = updates
        self._breakdown_by = breakdown_by
        self._groups: dict[_Key, _Group] | None = None  # None: not loaded since start
        self._quiet: set[int] = set()
        self._staged: tuple[dict[_Key, _Group], set[int]] | None = None

    def fresh(self) -> FleetCorrelator:
        """The same configuration with no state: it reads the open fleet incidents back
        (an HA takeover: the last leader wrote them)."""
        return FleetCorrelator(self.policy, target_labels=self.targets.snapshot(),
                               route=self._route, updates=self._updates,
                               breakdown_by=self._breakdown_by)

    def reconfigure(self, policy: fleet.FleetPolicy, route: Route | None,
                    breakdown_by: tuple[str, ...]) -> None:
        """A reload's `fleet:` and routes, keeping the open fleet incidents. Turned off
        (`enabled: false`), no new one opens and the open ones run to their end.
        `group_by` is not changed in place: the open incidents are keyed by it (a
        reload that changes it is refused: daemon/reload.py)."""
        if policy.group_by != self.policy.group_by:
            raise ValueError("fleet.group_by cannot change without a restart")
        self.policy, self._route, self._breakdown_by = policy, route, breakdown_by

    def any_open(self) -> bool:
        """Whether a fleet incident may be open (True when not read back yet)."""
        return self._groups is None or any(g.state.open for g in self._groups.values())

    # -- the tracker's hook ---------------------------------------------------------

    def correlate(self, s: Session, alerts: Sequence[Alert],
                  incidents: Mapping[tuple[str, str], int], opened: Iterable[int],
                  now_ms: int) -> Correlated:
        """One evaluation: decide each group, write its rows; the quiet ids and the news.

        `incidents`: (alert name, target) → the target's incident this evaluation
        touched; `opened`: those that opened in it.
        """
        if self._groups is None:
            self._groups, self._quiet = self._load(s)
        groups, quiet = dict(self._groups), set(self._quiet)
        opened = set(opened)
        news: list[FleetNews] = []
        for key, seen in sorted(self._observe(alerts).items()):
            g = groups.get(key, _Group())
            res = fleet.step(g.state, self._observation(key, seen, g, now_ms), self.policy)
            if res.reason in (fleet.Reason.QUIET, fleet.Reason.BELOW) and not res.state.firing:
                groups.pop(key, None)  # nothing to remember
                continue
            g = replace(g, state=res.state)
            if res.reason is fleet.Reason.OPENED:
                g = self._open(s, key, g, seen, now_ms)
            if g.incident_id and (res.state.open or res.reason is fleet.Reason.RESOLVED):
                g = self._members(s, key, g, seen, res, incidents, opened, quiet, now_ms)
            if res.message is not None and g.incident_id:
                news.append(self._tell(s, g, res.message, now_ms))
            if res.reason is fleet.Reason.RESOLVED:
                self._close(s, g, now_ms)
                g = replace(g, incident_id=0)
            groups[key] = g
        self._staged = (groups, quiet)
        touched = set(incidents.values())
        return Correlated(frozenset(touched & quiet), tuple(news))

    def committed(self) -> None:
        """The tracker's transaction committed: what was staged is now the state."""
        if self._staged is not None:
            self._groups, self._quiet = self._staged
            self._staged = None

    def offered(self, alerts: Sequence[Alert]) -> list[Alert]:
        """The remediation guard: alerts of a fleet incident's members are not offered."""
        return self.split(alerts)[0]

    def split(self, alerts: Sequence[Alert]) -> tuple[list[Alert], list[Alert]]:
        """The remediation guard (fleet.remediation) applied to an evaluation's alerts:
        (offered, withheld). The withheld are audited as refusals (`fleet_wide`) by the
        remediator, once per member incident."""
        if not self._groups:
            return list(alerts), []
        out: list[Alert] = []
        withheld: list[Alert] = []
        for a in alerts:
            target = _target(a)
            g = self._groups.get((a.name, self._group_of(a, target)))
            guard = fleet.remediation(g.state if g else None, target)
            (withheld if guard is fleet.Guard.FLEET_WIDE else out).append(a)
        return out, withheld

    # -- gathering -------------------------------------------------------------------

    def _observe(self, alerts: Sequence[Alert]) -> dict[_Key, _Seen]:
        seen: dict[_Key, _Seen] = {}
        for a in alerts:
            target = _target(a)
            if not target:
                continue  # not a target's alert (Sentinel's own): not a fleet's
            one = seen.setdefault((a.name, self._group_of(a, target)), _Seen())
            if a.state is AlertState.FIRING:
                one.fired.add(target)
                one.first = one.first or a
            elif a.resolved_at_ms is not None:
                one.resolved.add(target)
            if a.state in (AlertState.FIRING, AlertState.PENDING):
                one.active[target] = a.active_at_ms
        return seen

    def _observation(self, key: _Key, seen: _Seen, g: _Group, now_ms: int
                     ) -> fleet.Observation:
        severity = label_value(seen.first.labels, "severity") if seen.first else ""
        labels = g.labels or _fleet_labels(key, severity)
        return fleet.Observation(now_ms, frozenset(seen.fired), frozenset(seen.resolved),
                                 seen.active, self.targets.size(key[1]),
                                 self._interval(labels))

    def _group_of(self, a: Alert, target: str) -> Labels:
        own = self.targets.labels(target)
        return tuple((k, label_value(a.labels, k) or own.get(k, ""))
                     for k in self.policy.group_by)

    def _interval(self, labels: Labels) -> int:
        """The least time between two messages: the routes' group_interval (Alertmanager's
        5 min where a route sends every change at once, as the implicit one does)."""
        routes = match_routes(self._route, labels) if self._route is not None else []
        return max((r.group_interval_ms or DEFAULT_GROUP_INTERVAL_MS for r in routes),
                   default=DEFAULT_GROUP_INTERVAL_MS)

    # -- writing ---------------------------------------------------------------------

    def _open(self, s: Session, key: _Key, g: _Group, seen: _Seen, now_ms: int) -> _Group:
        first = seen.first
        assert first is not None  # it opens only on a firing alert
        now = ms_to_dt(now_ms)
        labels = _fleet_labels(key, label_value(first.labels, "severity"))
        active = min(seen.active.values(), default=first.active_at_ms)
        incident = Incident(
            group_key=_key_text(key), alertname=key[0], target="",
            status=IncidentStatus.OPEN, severity=label_value(first.labels, "severity"),
            summary="", labels=labels_to_json(labels), opened_at=now, resolved_at=None,
            updated_at=now, category=label_value(first.labels, "category") or None,
            evidence_at=ms_to_dt(active), detect_ms=max(0, now_ms - active))
        s.add(incident)
        s.flush()
        example = dict(first.annotations).get("summary", "")
        g = replace(g, incident_id=incident.id, labels=labels, rule_group=first.group,
                    active_at_ms=active, opened_ms=now_ms, example=example)
        _line(s, incident.id, now, f"remediation: {fleet.FLEET_WIDE_WHY}",
              {"remediation": "withheld", "guard": fleet.Guard.FLEET_WIDE.value})
        return g

    def _members(self, s: Session, key: _Key, g: _Group, seen: _Seen, res: fleet.Step,
                 incidents: Mapping[tuple[str, str], int], opened: set[int], quiet: set[int],
                 now_ms: int) -> _Group:
        """Link members whose incident this evaluation opened (quiet) or that joined; mark
        those that recovered."""
        now = ms_to_dt(now_ms)
        linking = set(res.joined) | {t for t in seen.fired
                                     if incidents.get((key[0], t)) in opened}
        ids = dict(self._own_incidents(s, key[0], linking, incidents))
        rows = {m.target: m for m in s.scalars(select(FleetMember).where(
            FleetMember.fleet_incident_id == g.incident_id,
            FleetMember.target.in_(sorted(linking | seen.resolved))))} if (
            linking or seen.resolved) else {}
        for target in sorted(linking):
            own = ids.get(target)
            hush = own is not None and own in opened
            row = rows.get(target)
            if row is None:
                s.add(FleetMember(fleet_incident_id=g.incident_id, target=target,
                                  incident_id=own, quiet=hush, joined_at=now, left_at=None))
            else:
                row.incident_id, row.quiet, row.left_at = own, hush, None
            if hush and own is not None:
                quiet.add(own)
                _line(s, own, now, f"joined fleet incident {g.incident_id} ({key[0]} on many "
                      f"targets at once): it pages nothing of its own; {fleet.FLEET_WIDE_WHY}",
                      {"fleet_incident": g.incident_id, "quiet": True,
                       "guard": fleet.Guard.FLEET_WIDE.value})
        for target in sorted(seen.resolved & set(rows)):
            if target not in seen.fired:
                rows[target].left_at = now
        return g

    def _own_incidents(self, s: Session, alertname: str, targets: set[str],
                       known: Mapping[tuple[str, str], int]) -> Iterable[tuple[str, int]]:
        missing = []
        for t in targets:
            if (alertname, t) in known:
                yield t, known[(alertname, t)]
            else:
                missing.append(f"{alertname}/{t}")
        for i in range(0, len(missing), 500):
            for incident_id, group_key in s.execute(select(Incident.id, Incident.group_key)
                                                    .where(Incident.group_key.in_(
                                                        missing[i:i + 500]),
                                                        Incident.status == IncidentStatus.OPEN)):
                yield group_key.split("/", 1)[1], incident_id

    def _tell(self, s: Session, g: _Group, m: fleet.Message, now_ms: int) -> FleetNews:
        """The fleet alert as the message shows it; an update also goes to the page's groups."""
        now = ms_to_dt(now_ms)
        alert = self._alert(g, m, now_ms)
        incident = s.get(Incident, g.incident_id)
        if incident is not None:
            incident.summary = dict(alert.annotations)["summary"]
            incident.updated_at = now
        # The numbers as data too: the API shows the size and breakdown from the last line.
        parts = fleet_page.breakdown_counts(
            {t: self.targets.labels(t) for t in g.state.firing}, self._breakdown_by)
        _line(s, g.incident_id, now, f"{m.kind.value}: {dict(alert.annotations)['summary']}",
              {"fleet": m.kind.value, "count": m.count, "size": m.size,
               "breakdown": {k: dict(list(v.items())[:BREAKDOWN_KEPT]) for k, v in parts.items()}})
        if m.kind is fleet.Kind.RESOLVED:
            return FleetNews(g.incident_id, alert.name, resolved=(alert,), closed=True)
        if m.kind is fleet.Kind.UPDATE:
            self._update(s, g, alert, now_ms)
        return FleetNews(g.incident_id, alert.name, fired=(alert,),
                         paged=m.kind is fleet.Kind.PAGE)

    def _alert(self, g: _Group, m: fleet.Message, now_ms: int) -> Alert:
        page = fleet_page.Page(label_value(g.labels, "alertname"), g.labels,
                               fleet_page.where(g.labels, FLEET_LABEL), g.rule_group,
                               g.active_at_ms, g.opened_ms, g.example)
        labels = {t: self.targets.labels(t) for t in g.state.firing}
        return fleet_page.fleet_alert(page, m, g.state.firing, labels,
                                      self._breakdown_by, self.policy.list_limit, now_ms)

    def _update(self, s: Session, g: _Group, alert: Alert, now_ms: int) -> None:
        """The new count to every group that sent the page, under its group key."""
        if self._updates is None or self._route is None:
            return
        fp = alert.fingerprint
        for route in match_routes(self._route, alert.labels):
            group = s.scalars(select(NotifyGroup).where(
                NotifyGroup.key == route.group_key(alert.labels))).one_or_none()
            if group is None or fp not in group.sent_firing:
                continue  # the page has not gone yet: it will carry the newest count
            key = hashlib.sha256(f"fleet-update|{g.incident_id}|{group.key}|{now_ms}"
                                 .encode()).hexdigest()[:32]
            self._updates.add_message(s, group.receiver, Notification(
                g.incident_id, NotificationKind.UPDATE, (alert,),
                tuple(sorted(group.group_labels.items())), group_key=group.key,
                idempotency_key=key, incident_ids=(g.incident_id,)), now_ms)

    def _close(self, s: Session, g: _Group, now_ms: int) -> None:
        incident = s.get(Incident, g.incident_id)
        if incident is None or incident.status != IncidentStatus.OPEN:
            return
        now = ms_to_dt(now_ms)
        incident.status = IncidentStatus.RESOLVED
        incident.resolved_at = incident.updated_at = now
        incident.resolve_ms = max(0, now_ms - dt_to_ms(incident.opened_at))
        s.add(TimelineEvent(incident_id=g.incident_id, at=now,
                            kind=TimelineKind.INCIDENT_RESOLVED,
                            message="incident resolved: the last of its targets recovered",
                            data={"fleet": "resolved"}))

    # -- after a restart -----------------------------------------------------------------

    def _load(self, s: Session) -> tuple[dict[_Key, _Group], set[int]]:
        """The open fleet incidents and their members, as the decisions left them."""
        groups: dict[_Key, _Group] = {}
        quiet: set[int] = set()
        for incident in s.scalars(select(Incident).where(
                Incident.group_key.startswith(KEY_PREFIX),
                Incident.status == IncidentStatus.OPEN)):
            labels = labels_from_json(incident.labels)
            members = s.scalars(select(FleetMember).where(
                FleetMember.fleet_incident_id == incident.id)).all()
            firing = frozenset(m.target for m in members if m.left_at is None)
            quiet |= {m.incident_id for m in members if m.quiet and m.incident_id}
            state = fleet.FleetState(firing=firing, open=True, opened=1,
                                     members=frozenset(m.target for m in members),
                                     told_count=len(firing),
                                     told_at_ms=dt_to_ms(incident.updated_at))
            group = tuple((k, label_value(labels, k)) for k in self.policy.group_by)
            groups[(incident.alertname, group)] = _Group(
                state, incident.id, labels,
                active_at_ms=dt_to_ms(incident.evidence_at or incident.opened_at),
                opened_ms=dt_to_ms(incident.opened_at))
        return groups, quiet


def _target(a: Alert) -> str:
    return label_value(a.labels, "target") or label_value(a.labels, "instance")


def _fleet_labels(key: _Key, severity: str) -> Labels:
    name, group = key
    values = {k: v for k, v in group if v}
    base = {"alertname": name, FLEET_LABEL: _key_text(key)[len(KEY_PREFIX):]}
    if severity:
        base["severity"] = severity
    return labels_of({**values, **base})


def _key_text(key: _Key) -> str:
    group = ", ".join(f"{k}={v}" for k, v in key[1] if v) or "all"
    return f"{KEY_PREFIX}{key[0]}/{group}"


def _line(s: Session, incident_id: int, at: Any, message: str, data: dict[str, Any]) -> None:
    s.add(TimelineEvent(incident_id=incident_id, at=at, kind=TimelineKind.NOTE,
                        message=message, data=data))
