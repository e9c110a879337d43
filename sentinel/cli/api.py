"""`sentinel approvals list|approve|deny` and `sentinel mcp`, one module of the `sentinel` command.

Approving from the command line writes the decision to the database (audited
as `cli:<user>`); the daemon's approval runner picks it up within a second.
`sentinel mcp` speaks MCP on stdio and answers from the daemon's HTTP API
(`--url`, default the config's listen address; token from $SENTINEL_TOKEN).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from sentinel.cli.common import database, db_args, load_config_or_exit

TOKEN_ENV = "SENTINEL_TOKEN"  # noqa: S105 (the name of a variable, not a token)


def add_parser(sub: Any) -> None:
    """Add `approvals` and `mcp` to the CLI's subparsers."""
    group = sub.add_parser("approvals", help="actions parked for approval")
    cmds = group.add_subparsers(title="what", metavar="WHAT")
    ls = cmds.add_parser("list", help="list approvals (pending by default)")
    db_args(ls)
    ls.add_argument("--all", action="store_true", help="every status, not only pending")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=lambda a: cmd_list(a, database(a)), quick_exit=True)
    for verb in ("approve", "deny"):
        c = cmds.add_parser(verb, help=f"{verb} a parked action")
        db_args(c)
        c.add_argument("id", type=int, metavar="ID")
        c.set_defaults(func=lambda a, v=verb: cmd_decide(a, database(a), v == "approve"))
    mcp = sub.add_parser("mcp", help="MCP server on stdio over the daemon's API")
    mcp.add_argument("-c", "--config", default=None, help="config file (for the listen address)")
    mcp.add_argument("--url", default=None, help="the daemon's base URL (default: from listen)")
    mcp.set_defaults(func=lambda a: cmd_mcp(a, load_config_or_exit))


def cmd_list(args: argparse.Namespace, db: Any) -> int:
    """Print approvals newest first."""
    from sentinel.api.history import approval_view
    from sentinel.respond.remediate import approvals

    rows = [approval_view(a) for a in approvals.listing(db, None if args.all else "pending")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no approvals" if args.all else "no pending approvals")
    for a in rows:
        print(f"{a['id']:>5}  {a['status']:<8} incident {a['incident_id']}  {a['action']} on "
              f"{a['target']} ({a['plan']})  expires {a['expires_at']}"
              + (f"  by {a['decided_by']}" if a["decided_by"] else ""))
    return 0


def cmd_decide(args: argparse.Namespace, db: Any, approve: bool) -> int:
    """Approve or deny; exit 1 when nothing changed (already decided, expired, unknown)."""
    from sentinel.api.auth import Principal
    from sentinel.api.service import ApiService

    who = Principal(f"cli:{_user()}", "write", "cli")
    service = ApiService(db)
    try:
        out = service.decide(args.id, approve, who, "cli")
    except Exception as exc:  # ApiError 404
        print(f"sentinel: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    print(out["message"])
    return 0 if out["changed"] else 1


def cmd_mcp(args: argparse.Namespace, load_config: Callable[[str | None], Any]) -> int:
    """Serve the MCP tools on stdio until stdin closes."""
    import logging

    from sentinel.api.mcp_server import HttpBackend, build_server

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # stdout is the protocol
    url = args.url or _url_from_listen(load_config(args.config).listen)
    server = build_server(HttpBackend(url, os.environ.get(TOKEN_ENV) or None))
    server.run("stdio")
    return 0


def _url_from_listen(listen: str) -> str:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return str(os.getuid()) if hasattr(os, "getuid") else "unknown"
