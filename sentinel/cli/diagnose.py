"""`sentinel diagnose INCIDENT_ID`: run the model diagnosis of one incident by hand."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from sentinel import exitcodes
from sentinel.cli.common import config_arg, database, load_config_or_exit


def add_parser(sub: Any) -> None:
    """Register `diagnose` on the top-level subparsers."""
    p = sub.add_parser(
        "diagnose", help="ask the model for a runbook of one incident now",
        description="Ask the configured model endpoints (diagnosis.endpoints) for a runbook of "
        "the incident and store it on its timeline, whatever the incident's state or earlier "
        "runbooks. Exit 0 when a validated runbook was stored, 1 otherwise.")
    config_arg(p)
    p.add_argument("--database", help="database URL (overrides the config's)")
    p.add_argument("id", type=int, help="incident id")
    p.set_defaults(func=run_diagnose)


def run_diagnose(args: argparse.Namespace) -> int:
    """Handle `sentinel diagnose`."""
    from sentinel.incidents import queries
    from sentinel.incidents.runbook_text import runbook_lines
    from sentinel.respond.diagnose.worker import DiagnosisWorker

    config = load_config_or_exit(args.config)
    if config.diagnosis is None:
        print("sentinel: no diagnosis section in the config (diagnosis.endpoints)",
              file=sys.stderr)
        return exitcodes.CONFIG
    db = database(args)
    if queries.get_incident(db, args.id) is None:
        print(f"sentinel: no incident {args.id}", file=sys.stderr)
        return exitcodes.FAILURE
    worker = DiagnosisWorker(db, config)
    try:
        stored = worker.diagnose(args.id, int(time.time() * 1000), has_static=True,
                                 retry=False)
    finally:
        worker.close()
    detail = queries.get_incident(db, args.id)
    assert detail is not None
    latest = [e for e in detail.timeline if e.kind in ("runbook", "note")][-1:]
    for entry in latest:
        print(entry.message)
        if entry.kind == "runbook" and entry.data:
            print("\n".join(runbook_lines(entry.data)))
    validated = stored and bool(latest and (latest[0].data or {}).get("validated"))
    return 0 if validated else 1
