"""A fleet-wide failure is not remediated target by target, and every refusal is audited
(issue 49): through the daemon's pipeline, the remediator and its engine, on SQLite and
PostgreSQL. Each member's incident gets one `fleet_wide` decision on its timeline, however
many evaluations pass, and the refusal is counted in
`sentinel_remediation_decisions_total{reason="fleet_wide"}`."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fixtures_e2e import wait_for
from prometheus_client import CollectorRegistry
from sqlalchemy import select
from test_fleet_incidents import NAME, T0, TARGETS, S, alert, fleet_incidents, gone, tracker
from test_fleet_incidents import _Rules as Rules

from sentinel.config.remediation import RemediationConfig
from sentinel.daemon.pipeline import Pipeline
from sentinel.daemon.selfmetrics import SelfMetrics
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, TimelineEvent, TimelineKind
from sentinel.model import labels_of
from sentinel.respond.remediate.base import ActionContext, Check, Outcome, TargetInfo
from sentinel.respond.remediate.dispatch import Remediator
from sentinel.respond.remediate.engine import Engine
from sentinel.respond.remediate.metrics import RemediationMetrics
from sentinel.store.memory import MemoryStore

pytestmark = pytest.mark.integration


class Never:
    """An action that must not run: a fleet member is never acted on."""

    ran: list[str] = []

    def check(self, ctx: ActionContext) -> Check:
        return Check(True, f"restart {ctx.target.name}")

    def run(self, ctx: ActionContext) -> Outcome:
        self.ran.append(ctx.target.name)
        return Outcome(True, "restarted")


class Told:
    """A Pager: what was paged, and what was told not fixed."""

    def __init__(self) -> None:
        self.pages: list[int] = []
        self.released: list[int] = []

    def page(self, incident_id: int, title: str, reason: str, labels: object) -> None:
        self.pages.append(incident_id)

    def not_fixed(self, incident_id: int, why: str) -> None:
        self.released.append(incident_id)


def config() -> RemediationConfig:
    # Dry run: an alert that is not fleet-wide is decided by the guards (`dry_run`), and
    # nothing is acted on in any case.
    return RemediationConfig.model_validate({"dry_run": True, "policies": [{
        "name": "restart", "alerts": [NAME, "VLLMEngineDead"],
        "steps": [{"docker_restart": {"container": "vllm", "socket": "/nonexistent.sock"},
                   "attempts": 3}]}]})


def decisions(db: Database) -> dict[str, list[str]]:
    """target → the reasons of the remediation decisions on its incidents' timelines."""
    out: dict[str, list[str]] = {}
    with db.session() as s:
        for target, data in s.execute(
                select(Incident.target, TimelineEvent.data)
                .join(TimelineEvent, TimelineEvent.incident_id == Incident.id)
                .where(TimelineEvent.kind == TimelineKind.ACTION.value)):
            if data and data.get("phase") in ("decision", "intent"):
                out.setdefault(target, []).append(str(data.get("reason", "allowed")))
    return out


def test_every_member_is_refused_once_audited_and_counted(incident_db: Database) -> None:
    registry = CollectorRegistry()
    metrics = RemediationMetrics(registry)
    told = Told()
    never = Never()
    targets = {t: TargetInfo(t, "http://127.0.0.1:1") for t in TARGETS}
    engine = Engine(config(), targets, incident_db, told, metrics=metrics,
                    actions={"docker_restart": never}, clock=lambda: T0 / 1000)
    remediator = Remediator(engine).start()
    rules = Rules()
    pipeline = Pipeline(store=MemoryStore(retention_ms=60_000), scraper=None,  # type: ignore[arg-type]
                        rules=rules, tracker=tracker(incident_db),  # type: ignore[arg-type]
                        receivers=(), metrics=SelfMetrics(), remediator=remediator)
    members = TARGETS[:12]
    try:
        for i in range(4):  # the storm holds over several evaluations
            rules.alerts = [alert(x) for x in members]
            pipeline.evaluate("vllm", T0 + i * 5 * S)

        def audited() -> bool:
            return all(decisions(incident_db).get(t) == ["fleet_wide"] for t in members)
        wait_for(audited, 60, what="a fleet_wide refusal on every member's incident")
        # One more evaluation after the audit: nothing is written twice.
        pipeline.evaluate("vllm", T0 + 30 * S)
        wait_for(lambda: remediator._queue.empty() and not remediator._pending, 60,
                 what="the remediator drained")
        assert {t: decisions(incident_db)[t] for t in members} == {
            t: ["fleet_wide"] for t in members}
        assert registry.get_sample_value("sentinel_remediation_decisions_total", {
            "policy": "restart", "reason": "fleet_wide"}) == len(members)
        assert never.ran == [] and told.pages == []  # nothing acted on, nothing paged
        assert len(told.released) == len(members)  # a page held for an action goes now
        assert len(fleet_incidents(incident_db)) == 1
        # Another alert on a member, not fleet-wide, is still offered and decided.
        other = replace(alert(TARGETS[19], at=T0 + 40 * S), labels=labels_of(
            {"alertname": "VLLMEngineDead", "target": TARGETS[19]}))
        rules.alerts = [alert(x) for x in members] + [other]
        pipeline.evaluate("vllm", T0 + 40 * S)
        wait_for(lambda: TARGETS[19] in decisions(incident_db), 60,
                 what="the other alert decided by the guards")
        assert decisions(incident_db)[TARGETS[19]] == ["dry_run"]
        # Recovered, and back as a target's own failure: the guards decide again.
        rules.alerts = [gone(alert(x), T0 + 50 * S) for x in members]
        pipeline.evaluate("vllm", T0 + 50 * S)
        assert fleet_incidents(incident_db)[0].status == "resolved"
    finally:
        remediator.stop()
