"""What does a fleet incident of N members cost to show and to diagnose? (issue 49)

N targets crash at once, each with a crash excerpt, through the real tracker and its
fleet hook (one fleet incident, N quiet members). Then, timed (median of --repeat):

- `GET /api/v1/incidents/{fleet}`'s body (history.get_incident): the counts, the
  peak swept from N members' join/leave times, the breakdown, 200 members listed;
- a member's body (its link to the fleet);
- the first page of the list (history.list_incidents, 50 rows) with its fleet marks;
- the diagnosis worker's look for work (records.pending): how many incidents it would
  ask the model about (1 for the fleet, not N) and what finding them costs.

In process, on SQLite in a temporary directory (or --db-url for PostgreSQL).

    python bench/fleet_views.py --targets 5000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sentinel.api import history
from sentinel.incidents import Database, IncidentTracker
from sentinel.incidents.fleet import FleetPolicy
from sentinel.incidents.fleet_hook import FleetCorrelator
from sentinel.incidents.log_events import record_log_events
from sentinel.model import Alert, AlertState, LogEvent, labels_of
from sentinel.respond.diagnose import records

T0 = 1_795_000_000_000
LINES = tuple(f"RESOURCE_EXHAUSTED: XLA:TPU compile permanent error line {i}" for i in range(20))


def storm(db: Database, n: int) -> tuple[int, int]:
    """N targets crash at once: (the fleet incident's id, one member's id)."""
    targets = [f"tpu-{i:05d}" for i in range(n)]
    record_log_events(db, [LogEvent(
        target=t, source="file:/var/log/vllm.log", signature="xla_hbm_oom",
        category="hbm_oom", severity="critical", t_ms=T0 - 5000, line_no=12,
        excerpt=LINES, runbook="lower the batch") for t in targets], now_ms=T0)
    labels = {t: {"pool": "a100" if i % 5 else "h100"} for i, t in enumerate(targets)}
    fleet = FleetCorrelator(FleetPolicy(), target_labels=labels, breakdown_by=("pool",))
    tracker = IncidentTracker(db, fleet=fleet)
    tracker.process([Alert(group="vllm", rule="VLLMHBMOutOfMemory", labels=labels_of(
        {"alertname": "VLLMHBMOutOfMemory", "target": t, "severity": "critical"}),
        annotations=(), state=AlertState.FIRING, value=1.0, active_at_ms=T0,
        last_eval_ms=T0, fired_at_ms=T0) for t in targets], T0)
    listed = history.list_incidents(db, {"limit": "500"}, T0)["incidents"]
    fleet_id = next(i["id"] for i in listed if i["fleet"])
    member = next(i["id"] for i in listed if i["fleet_incident_id"])
    return fleet_id, member


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The median wall time in ms over `repeat` runs, and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def main() -> None:
    """Build the storm, time each view, print one table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--db-url", default="")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleetviews") as tmp:
        db = Database(args.db_url or f"sqlite:///{Path(tmp) / 'sentinel.db'}")
        db.upgrade()
        t = time.perf_counter()
        fleet_id, member = storm(db, args.targets)
        print(f"storm of {args.targets:,} targets recorded in "
              f"{time.perf_counter() - t:.1f} s (one fleet incident #{fleet_id})")
        rows = []
        ms, d = timed(lambda: history.get_incident(db, fleet_id), args.repeat)
        f = d["fleet"]
        rows.append(("fleet incident detail", ms,
                     f"members now {f['members_now']:,}, peak {f['members_peak']:,}, "
                     f"listed {len(f['members'])}, more {f['members_more']:,}"))
        ms, d = timed(lambda: history.get_incident(db, member), args.repeat)
        rows.append(("a member's detail", ms,
                     f"fleet incident #{d['incident']['fleet_incident_id']}"))
        ms, page = timed(lambda: history.list_incidents(db, {}, T0), args.repeat)
        marked = sum(1 for i in page["incidents"] if i["fleet"] or i["fleet_incident_id"])
        rows.append(("list, first page (50)", ms, f"{marked} rows with a fleet mark"))
        ms, pending = timed(lambda: records.pending(db), args.repeat)
        rows.append(("diagnosis: incidents to ask about", ms,
                     f"{len(pending)} (of {args.targets + 1:,} open incidents)"))
        print(f"{'view':<36} {'median ms':>10}  what")
        for name, ms, what in rows:
            print(f"{name:<36} {ms:>10.1f}  {what}")
        db.dispose()


if __name__ == "__main__":
    main()
