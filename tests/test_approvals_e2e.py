"""Approval mode end to end: an HBM OOM parks the restart, pages with the links, and
- approved in time → runs, verified, resolved; a second approval does nothing;
- denied → never runs, audited with the token's name, escalated (paged);
- not approved before the expiry → never runs, audited, escalated."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_helpers import READ_TOKEN, WRITE_TOKEN, Rig, auth, start_rig, wait_log_source
from fixtures_e2e import wait_for
from sqlalchemy import select

from sentinel.incidents.models_api import ApiAudit
from sentinel.respond.remediate import state

pytestmark = pytest.mark.integration


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:
        yield Path(d)


def _pending(rig: Rig) -> dict:
    def find() -> dict | None:
        items = httpx.get(f"{rig.url}/api/v1/approvals?status=pending").json()["approvals"]
        return items[0] if items else None
    return wait_for(find, 15, "the action to be parked")  # type: ignore[return-value]


def _pages(sink, name: str) -> list[dict]:  # noqa: ANN001
    return [a for _, b, _ in list(sink.received) for a in b.get("alerts", [])
            if a["labels"].get("alertname") == name]


def _phases(rig: Rig, incident_id: int) -> list[str]:
    d = httpx.get(f"{rig.url}/api/v1/incidents/{incident_id}").json()
    return [t["data"]["phase"] for t in d["timeline"] if t["kind"] == "action"]


def test_approved_in_time_runs_once_and_is_verified(tmp_path, sock_dir, sink) -> None:
    rig = start_rig(tmp_path, sock_dir, sink.url, approval="required")
    try:
        wait_log_source(rig)
        rig.crash()
        a = _pending(rig)
        assert a["action"] == "docker_restart" and a["target"] == "tpu-a"
        page = wait_for(lambda: _pages(sink, "SentinelRemediationAwaitingApproval"), 10,
                        "on-call to be paged with the links")[0]
        assert f"/incidents/{a['incident_id']}#approval-{a['id']}" in page["annotations"]["summary"]
        assert f"/api/v1/approvals/{a['id']}/approve" in page["annotations"]["summary"]
        assert not sim_restarted(rig)  # parked: nothing ran
        assert state.attempts(rig.app.pipeline.tracker.db, a["incident_id"]) == []
        r = httpx.post(f"{rig.url}/api/v1/approvals/{a['id']}/approve", headers=auth(WRITE_TOKEN))
        assert r.status_code == 200 and r.json()["changed"] is True
        again = httpx.post(f"{rig.url}/api/v1/approvals/{a['id']}/approve",
                           headers=auth(WRITE_TOKEN)).json()
        assert again["changed"] is False
        wait_for(lambda: [x for x in state.attempts(rig.app.pipeline.tracker.db,
                                                     a["incident_id"]) if x.status != "running"],
                 20, "the approved action to finish")
        (attempt,) = state.attempts(rig.app.pipeline.tracker.db, a["incident_id"])
        assert attempt.status == "succeeded" and attempt.recovery_ms
        assert _phases(rig, a["incident_id"])[:3] == ["awaiting_approval", "approval_approved",
                                                       "intent"]
        assert "verify" in _phases(rig, a["incident_id"])
        # The approval is marked done after the attempt's outcome is written (and the pager
        # told): a moment later, so wait for it rather than read it once.
        done = wait_for(lambda: (d := httpx.get(f"{rig.url}/api/v1/approvals").json()
                                 ["approvals"][0])["status"] == "done" and d, 30,
                        "the approval marked done")
        assert done["attempt_id"] == attempt.id
        assert done["decided_by"] == "oncall-lead"
        # Still exactly one restart after the second approval.
        assert len([w for _, w in rig.sim.container.events if w == "POST start"]) == 1
    finally:
        rig.stop()


def sim_restarted(rig: Rig) -> bool:
    return any(w == "POST stop" for _, w in rig.sim.container.events)


def test_denied_is_not_run_audited_and_escalated(tmp_path, sock_dir, sink) -> None:
    rig = start_rig(tmp_path, sock_dir, sink.url, approval="required")
    try:
        wait_log_source(rig)
        rig.crash()
        a = _pending(rig)
        assert httpx.post(f"{rig.url}/api/v1/approvals/{a['id']}/deny",
                          headers=auth(READ_TOKEN)).status_code == 403
        r = httpx.post(f"{rig.url}/api/v1/approvals/{a['id']}/deny", headers=auth(WRITE_TOKEN))
        assert r.json()["status"] == "denied"
        page = wait_for(lambda: [p for p in _pages(sink, "SentinelRemediationRefused")
                                 if p["labels"].get("reason") == "approval_denied"], 10,
                        "the denial to be escalated")[0]
        assert "oncall-lead" in page["annotations"]["summary"]
        late = httpx.post(f"{rig.url}/api/v1/approvals/{a['id']}/approve",
                          headers=auth(WRITE_TOKEN)).json()
        assert late["changed"] is False and late["status"] == "denied"
        rig.app.approvals.tick()  # a tick more: still nothing runs
        assert not sim_restarted(rig)
        assert state.attempts(rig.app.pipeline.tracker.db, a["incident_id"]) == []
        assert "approval_denied" in _phases(rig, a["incident_id"])
        with rig.app.pipeline.tracker.db.session() as s:
            audit = s.scalars(select(ApiAudit).order_by(ApiAudit.id)).all()
        assert [(x.who, x.action, x.via) for x in audit][0] == (
            "oncall-lead", f"deny approval {a['id']}", "api")
    finally:
        rig.stop()


def test_expired_is_not_run_audited_and_escalated(tmp_path, sock_dir, sink) -> None:
    rig = start_rig(tmp_path, sock_dir, sink.url, approval="required", expiry="1s")
    try:
        wait_log_source(rig)
        rig.crash()
        a = _pending(rig)
        wait_for(lambda: [p for p in _pages(sink, "SentinelRemediationRefused")
                          if p["labels"].get("reason") == "approval_expired"], 10,
                 "the expiry to be escalated")
        r = httpx.post(f"{rig.url}/api/v1/approvals/{a['id']}/approve",
                       headers=auth(WRITE_TOKEN)).json()
        assert r["changed"] is False and r["status"] == "expired"
        assert not sim_restarted(rig)
        assert state.attempts(rig.app.pipeline.tracker.db, a["incident_id"]) == []
        assert "approval_expired" in _phases(rig, a["incident_id"])
        # Not parked again for the same step while the incident stays open.
        assert len(httpx.get(f"{rig.url}/api/v1/approvals").json()["approvals"]) == 1
    finally:
        rig.stop()
