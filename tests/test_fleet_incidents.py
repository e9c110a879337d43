"""A fleet-wide failure is one incident (issue 49): the tracker with its fleet hook, on
SQLite and PostgreSQL. The decisions themselves: tests/test_fleet_decisions.py."""

from __future__ import annotations

from dataclasses import replace

from notify_helpers import LoopbackReceiver, make_stage
from sqlalchemy import select
from test_notify_delivery import hook

from sentinel.config.notify import RouteConfig
from sentinel.incidents import Database, IncidentTracker, get_incident, list_incidents
from sentinel.incidents.fleet import FleetPolicy
from sentinel.incidents.fleet_hook import FleetCorrelator
from sentinel.incidents.models import Incident
from sentinel.incidents.models_fleet import FleetMember
from sentinel.model import Alert, AlertState, NotificationKind, labels_of
from sentinel.respond.notify.routing import build_route

T0 = 1_795_255_205_000
S = 1000
NAME = "VLLMKVCacheHigh"
TARGETS = [f"t{i:02d}" for i in range(20)]
POOLS = {t: ("a100" if i < 15 else "h100") for i, t in enumerate(TARGETS)}


def alert(target: str, state: AlertState = AlertState.FIRING, at: int = T0,
          resolved_at: int | None = None) -> Alert:
    labels = labels_of({"alertname": NAME, "target": target, "severity": "warning"})
    return Alert(group="vllm", rule=NAME, labels=labels,
                 annotations=labels_of({"summary": f"KV cache over 85 % on {target}"}),
                 state=state, value=0.9, active_at_ms=at - 30 * S, last_eval_ms=at,
                 fired_at_ms=at if state is AlertState.FIRING else None,
                 resolved_at_ms=resolved_at)


def gone(a: Alert, at: int) -> Alert:
    return replace(a, state=AlertState.INACTIVE, resolved_at_ms=at, last_eval_ms=at)


def tracker(db: Database, **policy: object) -> IncidentTracker:
    labels = {t: {"pool": POOLS[t]} for t in TARGETS}
    fleet = FleetCorrelator(FleetPolicy(**policy), target_labels=labels,  # type: ignore[arg-type]
                            breakdown_by=("pool",))
    return IncidentTracker(db, fleet=fleet)


def fleet_incidents(db: Database) -> list[Incident]:
    with db.session() as s:
        return list(s.scalars(select(Incident).where(Incident.target == "")).all())


def test_many_targets_at_once_open_one_fleet_incident_and_one_page(
        incident_db: Database) -> None:
    t = tracker(incident_db)
    firing = [alert(x) for x in TARGETS[:12]]
    out = t.process(firing, T0)
    assert len(out) == 1, [n.group_labels for n in out]
    page = out[0]
    assert page.kind is NotificationKind.FIRING
    [fa] = page.alerts
    summary = dict(fa.annotations)["summary"]
    assert summary.startswith(f"{NAME} on 12 of 20 targets: pool=a100: 12"), summary
    assert dict(fa.annotations)["description"] == "firing on: " + ", ".join(TARGETS[:12])
    assert "restarting every server" in dict(fa.annotations)["sentinel_remediation"]
    [fleet_incident] = fleet_incidents(incident_db)
    assert fleet_incident.group_key == f"fleet/{NAME}/all"
    assert page.incident_id == fleet_incident.id
    # Every target keeps its own incident (its history still answers), joined and quiet.
    per_target = [i for i in list_incidents(incident_db) if i.target]
    assert sorted(i.target for i in per_target) == TARGETS[:12]
    detail = get_incident(incident_db, per_target[0].id)
    assert detail is not None
    assert any(f"joined fleet incident {fleet_incident.id}" in e.message
               for e in detail.timeline)
    with incident_db.session() as s:
        members = s.scalars(select(FleetMember)).all()
        assert {m.target for m in members} == set(TARGETS[:12])
        assert all(m.quiet and m.incident_id for m in members)
    # The fleet incident's own timeline: the guard, and what the page said.
    fleet_view = get_incident(incident_db, fleet_incident.id)
    assert fleet_view is not None and fleet_view.incident.summary == summary
    lines = [e.message for e in fleet_view.timeline]
    assert any(m.startswith("remediation: fleet-wide failure") for m in lines), lines
    assert f"page: {summary}" in lines, lines


def test_a_few_targets_page_each_as_before(incident_db: Database) -> None:
    t = tracker(incident_db)
    out = t.process([alert(x) for x in TARGETS[:2]], T0)
    assert len(out) == 2 and not fleet_incidents(incident_db)


def test_pending_targets_count_so_the_first_firings_do_not_page_alone(
        incident_db: Database) -> None:
    t = tracker(incident_db)
    evaluation = [alert(x) for x in TARGETS[:2]] + [
        alert(x, AlertState.PENDING) for x in TARGETS[2:14]]
    out = t.process(evaluation, T0)
    assert len(out) == 1 and out[0].incident_id == fleet_incidents(incident_db)[0].id
    # The pending ones fire next: they join, quietly.
    assert t.process([alert(x, at=T0 + 5 * S) for x in TARGETS[:14]], T0 + 5 * S) == []
    assert len(fleet_incidents(incident_db)) == 1


def test_count_changes_are_updates_and_the_last_recovery_resolves(
        incident_db: Database) -> None:
    t = tracker(incident_db)
    firing = [alert(x) for x in TARGETS[:12]]
    t.process(firing, T0)
    # Two recover within the group_interval: nothing is sent, no per-target resolve.
    now = T0 + 10 * S
    evaluation = [gone(a, now) for a in firing[:2]] + firing[2:]
    assert t.process(evaluation, now) == []
    # Once the interval passed, one update with the new count (not a page).
    now = T0 + 6 * 60 * S
    out = t.process(firing[2:], now)
    assert [n.kind for n in out] == [NotificationKind.FIRING]
    assert " on 10 of 20 targets" in dict(out[0].alerts[0].annotations)["summary"]
    assert fleet_incidents(incident_db)[0].status == "open"
    # The last ones recover: the fleet incident resolves, once.
    now += 10 * S
    out = t.process([gone(a, now) for a in firing[2:]], now)
    assert [n.kind for n in out] == [NotificationKind.RESOLVED]
    [fi] = fleet_incidents(incident_db)
    assert fi.status == "resolved" and out[0].incident_id == fi.id
    assert all(i.status == "resolved" for i in list_incidents(incident_db))


def test_remediation_is_withheld_from_members(incident_db: Database) -> None:
    t = tracker(incident_db)
    firing = [alert(x) for x in TARGETS[:12]]
    t.process(firing, T0)
    assert t.fleet is not None
    other = alert(TARGETS[19])
    assert t.fleet.offered(firing + [replace(other, labels=labels_of(
        {"alertname": "Other", "target": TARGETS[19]}))]) != []
    assert all(a.name == "Other" for a in t.fleet.offered(
        firing + [replace(other, labels=labels_of({"alertname": "Other",
                                                   "target": TARGETS[19]}))]))


def test_a_restart_keeps_the_fleet_incident(incident_db: Database) -> None:
    firing = [alert(x) for x in TARGETS[:12]]
    tracker(incident_db).process(firing, T0)
    again = tracker(incident_db)  # a new process: the state is read back
    assert again.process(firing, T0 + 5 * S) == []
    now = T0 + 20 * S
    out = again.process([gone(a, now) for a in firing], now)
    assert [n.kind for n in out] == [NotificationKind.RESOLVED]
    assert [i.status for i in fleet_incidents(incident_db)] == ["resolved"]


def test_a_fraction_of_a_small_group_is_a_fleet(incident_db: Database) -> None:
    t = tracker(incident_db, group_by=("pool",))
    out = t.process([alert(x) for x in TARGETS[15:18]], T0)  # 3 of 5 h100 servers
    assert len(out) == 1
    assert fleet_incidents(incident_db)[0].group_key == f"fleet/{NAME}/pool=h100"


def test_turned_off_pages_per_target(incident_db: Database) -> None:
    t = tracker(incident_db, enabled=False)
    assert len(t.process([alert(x) for x in TARGETS[:12]], T0)) == 12


def test_through_the_notification_path_one_page_updates_and_one_resolve(
        incident_db: Database, loopback: LoopbackReceiver) -> None:
    """Tracker → outbox → dispatcher → sender → a webhook on loopback, as the daemon wires
    them: one page, a later count as an `update` under the page's group key no sooner than
    the route's group_interval, one resolve; never a per-target message."""
    route = RouteConfig.model_validate({"receiver": "oncall", "group_by": ["target"],
                                        "group_wait": "0s", "group_interval": "1m"})
    stage = make_stage(incident_db, {"oncall": hook(loopback)}, route)
    stage.tracker.fleet = FleetCorrelator(
        FleetPolicy(), target_labels={t: {} for t in TARGETS},
        route=build_route(route, ["oncall"]), updates=stage.dispatcher.outbox)
    firing = [alert(x) for x in TARGETS[:12]]
    stage.tracker.process(firing, T0)
    stage.tick(T0 + S)
    [page] = [r.json() for r in loopback.accepted()]
    assert isinstance(page, dict) and page["status"] == "firing" and len(page["alerts"]) == 1
    assert "on 12 of 20 targets" in page["alerts"][0]["annotations"]["summary"]
    # Two more targets within the interval: nothing yet; after it, one update.
    more = firing + [alert(x, at=T0 + 10 * S) for x in TARGETS[12:14]]
    stage.tracker.process(more, T0 + 10 * S)
    stage.tick(T0 + 11 * S)
    assert len(loopback.accepted()) == 1
    stage.tracker.process(more, T0 + 70 * S)
    stage.tick(T0 + 71 * S)
    bodies = [r.json() for r in loopback.accepted()]
    assert [b["status"] for b in bodies] == ["firing", "update"]  # type: ignore[index]
    update = bodies[1]
    assert isinstance(update, dict) and update["groupKey"] == page["groupKey"]
    assert "on 14 of 20 targets" in update["alerts"][0]["annotations"]["summary"]
    # Everyone recovers: one resolve for the fleet, nothing per target.
    now = T0 + 200 * S
    stage.tracker.process([gone(a, now) for a in more], now)
    stage.tick(now + S)
    stage.tick(now + 2 * S)
    assert [b["status"] for b in (r.json() for r in loopback.accepted())] == [  # type: ignore[index]
        "firing", "update", "resolved"]


class _Rules:
    """The rule engine's side of one evaluation: these alerts, nothing failed."""

    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    def evaluate_group(self, group: str, now_ms: int) -> list[Alert]:
        return self.alerts

    def failed_rules(self, group: str) -> int:
        return 0

    def acknowledge(self, alerts: list[Alert]) -> None:
        pass


class _Remediator:
    """Records what the pipeline offers to remediation."""

    def __init__(self) -> None:
        self.offered: list[list[str]] = []

    def offer(self, alerts: list[Alert], now_ms: int, withheld: list[Alert] = ()) -> None:  # type: ignore[assignment]
        self.offered.append(sorted(f"{a.name}/{dict(a.labels)['target']}" for a in alerts))


def test_the_pipeline_offers_remediation_no_member_of_a_fleet_incident(
        incident_db: Database) -> None:
    """An evaluation through the daemon's pipeline: a fleet-wide failure's alerts are not
    offered to remediation (guard `fleet_wide`); another alert on a target still is."""
    from sentinel.daemon.pipeline import Pipeline
    from sentinel.daemon.selfmetrics import SelfMetrics
    from sentinel.store.memory import MemoryStore

    rules, remediator = _Rules(), _Remediator()
    pipeline = Pipeline(store=MemoryStore(retention_ms=60_000), scraper=None,  # type: ignore[arg-type]
                        rules=rules, tracker=tracker(incident_db),  # type: ignore[arg-type]
                        receivers=(), metrics=SelfMetrics(), remediator=remediator)
    few = [alert(x) for x in TARGETS[:2]]
    rules.alerts = few
    pipeline.evaluate("vllm", T0)
    assert remediator.offered[-1] == [f"{NAME}/{t}" for t in TARGETS[:2]]  # not fleet-wide
    other = replace(alert(TARGETS[19]), labels=labels_of(
        {"alertname": "VLLMEngineDead", "target": TARGETS[19]}))
    rules.alerts = [alert(x, at=T0 + 5 * S) for x in TARGETS[:12]] + [other]
    pipeline.evaluate("vllm", T0 + 5 * S)
    assert remediator.offered[-1] == [f"VLLMEngineDead/{TARGETS[19]}"]
    assert len(fleet_incidents(incident_db)) == 1
