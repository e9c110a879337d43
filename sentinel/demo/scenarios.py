"""The demo's scripted failures: what each injects, when it is over, and how it ended.

- backlog: requests queue on a busy server (VLLMRequestsQueued, for: 30s); the demo
  clears the queue once the page arrived;
- stall: the engine wedges behind a live /health (VLLMEngineStalled, its 2 m `for`
  cut to 30 s); the demo unwedges it once paged;
- crash-fixed: an HBM OOM in the log of a server whose XLA cache is warm: Sentinel
  restarts it through the simulator's Docker socket and verifies it serves;
- crash-refused: the same crash where the cache is empty: the policy does not allow
  a cold restart (20+ minutes of compilation), so Sentinel refuses and on-call is paged.

Every check reads the incident on record (the database), never Sentinel's insides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sentinel.incidents.queries import IncidentDetail
from sentinel.sim.crashable import Crashable
from sentinel.sim.server import SimServer

BACKLOG, STALL, CRASH_FIXED, CRASH_REFUSED = "backlog", "stall", "crash-fixed", "crash-refused"
ALL = (CRASH_FIXED, CRASH_REFUSED, BACKLOG, STALL)
_RECOVERY: dict[str, dict[str, Any]] = {
    BACKLOG: {"num_requests_waiting": 0, "num_requests_running": 3},
    STALL: {"stalled": False, "load_rps": 5, "num_requests_running": 3},
}


@dataclass
class Scenario:
    """One scripted failure on its own target, and what the demo has seen of it."""

    key: str
    title: str
    target: str
    alertname: str
    sim: SimServer
    crashable: Crashable | None = None
    alert_state: str = "inactive"
    seen_events: int = 0
    incident_id: int | None = None
    status: str | None = None
    paged: bool = False
    recovering: bool = False
    done: bool = False
    ending: str = ""  # how it ended, in a few words (the table's last column)

    def begin(self) -> str:
        """Inject the failure; what was done, for the demo's log."""
        if self.crashable is not None:
            self.crashable.crash()
            return f"{self.target}: HBM OOM traceback in its log, the process exits"
        if self.key == BACKLOG:
            self.sim.set_state(num_requests_waiting=6, num_requests_running=16)
            return f"{self.target}: a backlog, 6 requests waiting (tokens still flowing)"
        self.sim.set_state(stalled=True, load_rps=0, num_requests_running=0)
        return (f"{self.target}: the engine wedges: /health still 200, no token ever streamed "
                "(POST /sim/state {\"stalled\": true})")

    def recover_if_paged(self) -> str | None:
        """Backlog and stall: end the failure once its page arrived (what on-call would do)."""
        if self.key not in _RECOVERY or not self.paged or self.recovering:
            return None
        self.sim.update_state(_RECOVERY[self.key])
        self.recovering = True
        return f"recovery on {self.target}: {_RECOVERY[self.key]}"

    def check_done(self, detail: IncidentDetail, resolved_sent: bool) -> None:
        """Whether the scenario reached its end, from the incident on record."""
        if self.key == CRASH_FIXED:
            verified = _action(detail, "verify", ok=True)
            if detail.incident.status == "resolved" and verified is not None:
                recovery = detail.clocks.recovery_ms
                took = f" in {recovery / 1000:.1f}s" if recovery is not None else ""
                self.done, self.ending = True, f"fixed by a warm restart, verified{took}"
        elif self.key == CRASH_REFUSED:
            refused = _action(detail, "decision", allowed=False)
            if refused is not None and _model_runbook(detail):
                reason = (refused.data or {}).get("reason", "refused")
                self.done, self.ending = True, f"restart refused ({reason}), still down"
        elif detail.incident.status == "resolved" and resolved_sent:
            self.done, self.ending = True, "recovered by the demo, resolved"


def _action(detail: IncidentDetail, phase: str, **want: object) -> Any:
    for e in detail.timeline:
        data = e.data or {}
        if e.kind == "action" and data.get("phase") == phase and all(
                data.get(k) == v for k, v in want.items()):
            return e
    return None


def _model_runbook(detail: IncidentDetail) -> bool:
    return any(e.kind == "runbook" and (e.data or {}).get("source") == "model"
               for e in detail.timeline)
