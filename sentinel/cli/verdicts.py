"""`sentinel verdicts list|promote`: which fixes work, and promoting a demoted policy step.

`list` prints each policy's and action's verdicts over the last 30 days and the
demoted steps; `promote POLICY STEP` (STEP counts from 1, as the timeline does)
writes the promotion to the database, audited as `cli:<user>`: the daemon's
engine reads it at its next decision.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sentinel.cli.common import database, db_args


def add_parser(sub: Any) -> None:
    """Add `verdicts` to the CLI's subparsers."""
    group = sub.add_parser("verdicts", help="remediation verdicts and demoted policy steps")
    cmds = group.add_subparsers(title="what", metavar="WHAT")
    ls = cmds.add_parser("list", help="verdicts per policy and action, and demoted steps")
    db_args(ls)
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=lambda a: cmd_list(a, database(a)), quick_exit=True)
    pr = cmds.add_parser("promote", help="let a demoted policy step act without approval")
    db_args(pr)
    pr.add_argument("policy", metavar="POLICY")
    pr.add_argument("step", type=int, metavar="STEP", help="the step, counted from 1")
    pr.set_defaults(func=lambda a: cmd_promote(a, database(a)))


def cmd_list(args: argparse.Namespace, db: Any) -> int:
    """Print the verdicts and the demoted steps."""
    from sentinel.api.service import ApiService

    out = ApiService(db).verdicts({})
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    if not out["by_policy"]:
        print("no verdict yet")
    for v in out["by_policy"]:
        share = "-" if v["fixed_share"] is None else f"{v['fixed_share']:.0%}"
        print(f"{v['policy']:<24} {v['action']:<20} fixed {v['fixed']:>3}  recurred "
              f"{v['recurred']:>3}  failed {v['failed']:>3}  overridden {v['overridden']:>3}"
              f"  ({share} fixed)")
    for st in out["steps"]:
        state = "DEMOTED (approval required)" if st["demoted"] else \
            f"promoted by {st['promoted_by']}"
        print(f"policy {st['policy']} step {st['step']}: {state}: {st['reason']}")
    return 0


def cmd_promote(args: argparse.Namespace, db: Any) -> int:
    """Promote; exit 1 when the step was not demoted."""
    from sentinel.api.auth import Principal
    from sentinel.api.service import ApiService
    from sentinel.cli.api import _user

    who = Principal(f"cli:{_user()}", "write", "cli")
    try:
        ApiService(db).promote(args.policy, args.step, who, "cli")
    except Exception as exc:  # ApiError 409
        print(f"sentinel: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    print(f"policy {args.policy} step {args.step} promoted: it acts without approval again")
    return 0
