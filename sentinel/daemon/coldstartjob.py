"""The daemon's side of a noticed cold start (collect/coldstart.py): the note on the target's
open incident and, where a policy covering the target says `page_on_cold_start`, a page.

Without an open incident the shipped `VLLMColdStart` rule (on `sentinel_cold_start`) opens
one at the next evaluation; routing decides who hears of it.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select

from sentinel.collect.coldstart import ColdStart, ColdStarts
from sentinel.config import Config
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, IncidentStatus
from sentinel.respond.remediate.restart_cost import configured
from sentinel.respond.remediate.state import add_event

log = logging.getLogger(__name__)

TITLE = "SentinelColdStart"


def cold_starts(config: Config, accelerators: Any) -> ColdStarts:
    """The watch, with each target's expected warm time from `restart_cost.expect`."""
    cost = config.remediation.restart_cost
    return ColdStarts(lambda target: configured(accelerators.of(target), cost).warm_ms)


def noticed(db: Database, config: Config, pager: Any, notice: ColdStart) -> int | None:
    """Record a noticed cold start on the target's open incident (its id), and page where a
    policy says so; None when the target has no open incident."""
    since = (notice.noticed_ms - notice.started_ms) / 1000
    message = (f"cold start of {notice.target} noticed {since:.0f}s after it began: "
               f"{notice.evidence}")
    log.warning("%s", message)
    with db.session() as s:
        incident_id = s.scalar(select(Incident.id).where(
            Incident.target == notice.target, Incident.status == IncidentStatus.OPEN.value
        ).order_by(Incident.id.desc()).limit(1))
        if incident_id is None:
            return None
        add_event(s, incident_id, notice.noticed_ms, message, {
            "phase": "cold_start", "target": notice.target, "started_ms": notice.started_ms,
            "noticed_ms": notice.noticed_ms, "evidence": notice.evidence})
    paging = [p.name for p in config.remediation.policies
              if p.page_on_cold_start and (not p.targets or notice.target in p.targets)]
    if paging and pager is not None:
        try:
            pager.page(incident_id, TITLE, message, {"target": notice.target,
                                                     "policy": paging[0],
                                                     "reason": "cold_start"})
        except Exception:  # the note stands; paging is best effort here
            log.exception("paging the cold start of %s failed", notice.target)
    return incident_id
