"""`sentinel silence add|list|expire`: silences by label matchers, from the command line.

The same objects as the API's (`/api/v2/silences`, amtool, the page): created,
listed and expired through the API service, so a CLI silence has the UUID the
API shows, the same checks and an audit row (`via: cli`, the login name as who).
Its integer row id (what this command printed before) still finds it.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from datetime import UTC, datetime
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
    ex.add_argument("ids", nargs="+", metavar="ID", help="the silence's id (the UUID the "
                    "API and amtool show; an integer row id still works)")
    ex.set_defaults(func=lambda a: cmd_expire(a, database(a)))


def cmd_add(args: argparse.Namespace, db: Any) -> int:
    """Create the silence through the API service; prints its UUID (the API's id)."""
    from sentinel.api.errors import ApiError
    from sentinel.config.durations import parse_duration
    from sentinel.respond.notify.matchers import parse_matchers

    matchers = parse_matchers(args.matchers)  # ValueError → one clear line from main
    now = time.time()
    ends = now + parse_duration(args.duration) / 1000
    author = args.author if args.author is not None else _user()
    body = {"matchers": [{"name": m.name, "value": m.value, "isRegex": "~" in str(m.op),
                          "isEqual": not str(m.op).startswith("!")} for m in matchers],
            "startsAt": _iso(now), "endsAt": _iso(ends), "comment": args.comment}
    try:
        out = _service(db).create_silence(body, _who(author), "cli")
    except ApiError as exc:
        print(f"sentinel: {exc.message}", file=sys.stderr)
        return 1
    print(out["silenceID"])
    return 0


def cmd_list(args: argparse.Namespace, db: Any) -> int:
    """Print silences, newest first, by the UUID the API and amtool show."""
    from sentinel.respond.notify.silences import list_silences

    items = list_silences(db, int(time.time() * 1000), include_expired=args.all)
    if args.json:
        print(json.dumps([{"id": s.uuid, "row_id": s.id, "matchers": list(s.matchers),
                           "state": s.state,
                           "starts_at": s.starts_at.isoformat(), "ends_at": s.ends_at.isoformat(),
                           "created_by": s.created_by, "comment": s.comment} for s in items],
                         indent=2))
        return 0
    if not items:
        print("no silences")
    for s in items:
        print(f"{s.uuid}  {s.state:<8} until {s.ends_at:%Y-%m-%d %H:%M}Z  {' '.join(s.matchers)}"
              f"  ({s.created_by}: {s.comment})")
    return 0


def cmd_expire(args: argparse.Namespace, db: Any) -> int:
    """Expire each id (UUID or row id) through the API service; exit 1 if any failed."""
    from sentinel.api.errors import ApiError

    code = 0
    service, who = _service(db), _who(_user())
    for sid in args.ids:
        try:
            service.expire_silence(sid, who, "cli")
            print(f"expired silence {sid}")
        except ApiError as exc:
            print(f"sentinel: {exc.message}", file=sys.stderr)
            code = 1
    return code


def _service(db: Any) -> Any:  # noqa: ANN401 (sentinel.api.service.ApiService)
    from sentinel.api.service import ApiService

    return ApiService(db)


def _who(name: str) -> Any:  # noqa: ANN401 (sentinel.api.auth.Principal)
    """The CLI's principal: whoever can open the database may write, as before."""
    from sentinel.api.auth import Principal

    return Principal(name or "cli", "write", "cli")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="milliseconds")


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name in some containers
        return ""
