"""`sentinel silence add|list|expire`: silences by label matchers, from the command line."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from typing import Any

from sentinel.cli.common import database, db_args


def add_parser(sub: Any) -> None:
    """Add the `silence` command group to the CLI's subparsers."""
    group = sub.add_parser("silence", help="silence notifications by label matchers")
    cmds = group.add_subparsers(title="what", metavar="WHAT")
    add = cmds.add_parser("add", help="create a silence", epilog='example: sentinel silence add '
                          'target=gemma-26b alertname=~"KV.*" -d 2h -C "node maintenance"')
    db_args(add)
    add.add_argument("matchers", nargs="+", metavar="MATCHER",
                     help='label matcher: name=value, name!=value, name=~regex, name!~regex')
    add.add_argument("-d", "--duration", default="1h", help="how long (default 1h)")
    add.add_argument("-a", "--author", default=None, help="who (default: the current user)")
    add.add_argument("-C", "--comment", required=True, help="why (required)")
    add.set_defaults(func=lambda a: cmd_add(a, database(a)))
    ls = cmds.add_parser("list", help="list active and pending silences")
    db_args(ls)
    ls.add_argument("--all", action="store_true", help="include expired silences")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=lambda a: cmd_list(a, database(a)), quick_exit=True)
    ex = cmds.add_parser("expire", help="end a silence now")
    db_args(ex)
    ex.add_argument("ids", nargs="+", metavar="ID", help="integer id or API v2 UUID")
    ex.set_defaults(func=lambda a: cmd_expire(a, database(a)))


def cmd_add(args: argparse.Namespace, db: Any) -> int:
    """Create the silence; prints its id."""
    from sentinel.config.durations import parse_duration
    from sentinel.respond.notify.matchers import parse_matchers
    from sentinel.respond.notify.silences import add_silence

    matchers = parse_matchers(args.matchers)  # ValueError → one clear line from main
    now = int(time.time() * 1000)
    ends = now + parse_duration(args.duration)
    author = args.author if args.author is not None else _user()
    sid = add_silence(db, matchers, now, ends, author, args.comment, now)
    print(sid)
    return 0


def cmd_list(args: argparse.Namespace, db: Any) -> int:
    """Print silences, newest first."""
    from sentinel.respond.notify.silences import list_silences

    items = list_silences(db, int(time.time() * 1000), include_expired=args.all)
    if args.json:
        print(json.dumps([{"id": s.id, "uuid": s.uuid, "matchers": list(s.matchers),
                           "state": s.state,
                           "starts_at": s.starts_at.isoformat(), "ends_at": s.ends_at.isoformat(),
                           "created_by": s.created_by, "comment": s.comment} for s in items],
                         indent=2))
        return 0
    if not items:
        print("no silences")
    for s in items:
        print(f"{s.id:>5}  {s.state:<8} until {s.ends_at:%Y-%m-%d %H:%M}Z  {' '.join(s.matchers)}"
              f"  ({s.created_by}: {s.comment})")
    return 0


def cmd_expire(args: argparse.Namespace, db: Any) -> int:
    """Expire each id; exit 1 if any could not be expired."""
    from sentinel.respond.notify.silences import SilenceError, expire_silence

    code = 0
    for sid in args.ids:
        try:
            expire_silence(db, sid, int(time.time() * 1000))
            print(f"expired silence {sid}")
        except SilenceError as exc:
            print(f"sentinel: {exc}", file=sys.stderr)
            code = 1
    return code


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name in some containers
        return ""
