"""`sentinel incidents list|show` (history, read-only) and `sentinel db upgrade`.

The read-only commands open an existing database at the current schema and
never migrate (`open_existing`); only `db upgrade` runs Alembic.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sentinel.cli.common import database, db_args, since


def add_parser(sub: Any) -> None:
    """Register `incidents`."""
    inc = sub.add_parser("incidents", help="query incident history").add_subparsers(
        title="what", metavar="WHAT")
    il = inc.add_parser("list", help="list incidents, newest first")
    db_args(il)
    il.add_argument("--status", choices=["open", "resolved"], help="only this status")
    il.add_argument("--alertname", help="only incidents of this alert")
    il.add_argument("--target", help="only incidents of this target")
    il.add_argument("--since", type=since, metavar="WHEN",
                    help="only incidents opened since WHEN: a duration ago (1h, 7d) or an "
                    "ISO-8601 time")
    il.add_argument("--limit", type=int, default=50, help="at most this many, 1-1000 (default 50)")
    il.add_argument("--json", action="store_true", help="machine-readable output")
    il.set_defaults(func=cmd_list, quick_exit=True)
    ish = inc.add_parser("show", help="one incident with its alerts and timeline")
    db_args(ish)
    ish.add_argument("id", type=int, help="incident id")
    ish.add_argument("--json", action="store_true", help="machine-readable output")
    ish.set_defaults(func=cmd_show, quick_exit=True)


def add_db_parser(sub: Any) -> None:
    """Register `db`."""
    db = sub.add_parser("db", help="database schema").add_subparsers(title="what", metavar="WHAT")
    du = db.add_parser("upgrade", help="apply migrations (alembic upgrade head)")
    db_args(du)
    du.set_defaults(func=cmd_db_upgrade)


def cmd_list(args: argparse.Namespace) -> int:
    """Print incidents, newest first."""
    from sentinel.incidents import queries, render

    db = database(args)
    items = queries.list_incidents(db, status=args.status, alertname=args.alertname,
                                   target=args.target, since=args.since, limit=args.limit)
    if args.json:
        print(json.dumps(render.list_json(items), indent=2))
    else:
        print(render.render_list(items))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Print one incident with its alerts and timeline."""
    from sentinel.incidents import queries, render

    detail = queries.get_incident(database(args), args.id)
    if detail is None:
        print(f"sentinel: no incident {args.id}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(render.detail_json(detail), indent=2))
    else:
        print(render.render_detail(detail))
    return 0


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    """Create or migrate the database to the newest schema, saying which it did."""
    before = database(args, upgrade=False, must_exist=False).current_revision()
    after = database(args, upgrade=True).current_revision()
    if before == after:
        print(f"database schema is up to date ({after})")
    elif before is None:
        print(f"database schema created at {after}")
    else:
        print(f"database schema upgraded from {before} to {after}")
    return 0
