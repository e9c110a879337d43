"""`sentinel run` (the daemon) and `sentinel demo` (the scripted failures)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from sentinel import exitcodes
from sentinel.cli.common import config_arg, config_path, load_config_or_exit


def add_parser(sub: Any) -> None:
    """Register `run` and `demo`."""
    run = sub.add_parser("run", help="run the daemon",
                         description="Run the daemon until SIGTERM/SIGINT; SIGHUP reloads the "
                         "configuration.")
    config_arg(run)
    run.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    run.add_argument("--log-format", choices=("text", "json"),
                     default=os.environ.get("SENTINEL_LOG_FORMAT", "text"),
                     help="text (default) or json: one object a line with incident, target "
                     "and alertname as fields, for log pipelines (env SENTINEL_LOG_FORMAT)")
    run.add_argument("--listen", metavar="HOST:PORT", default=os.environ.get("SENTINEL_LISTEN"),
                     help="address for /metrics, /healthz and the API, overriding the config's "
                     "`listen` (env SENTINEL_LISTEN; the container image sets 0.0.0.0:9465)")
    run.set_defaults(func=cmd_run)

    demo = sub.add_parser("demo", help="scripted failures against the bundled simulators",
                          description="Start simulators, a model simulator, two webhook "
                          "receivers (pager, chat) and the daemon (SQLite in a temporary "
                          "folder) on free ports; crash two servers (a warm XLA cache: "
                          "restarted and verified; a cold one: restart refused), queue a "
                          "backlog and stall an engine; print what happens, then the pages and "
                          "notifications per failure. Exits 0 when every failure ran its "
                          "course in time.")
    demo.add_argument("--keep", action="store_true", help="keep the temporary folder")
    demo.set_defaults(func=cmd_demo)


def cmd_run(args: argparse.Namespace) -> int:
    """Load the config, refuse what `check config` refuses, run the daemon until a signal."""
    from sentinel.daemon.startsignals import hold_sighup

    hold_sighup()  # before the slow part: a reload sent now is queued, not fatal
    from sentinel.daemon.run import config_loader, run_daemon
    from sentinel.preflight import NOTE, finding_lines, preflight

    if args.log_format not in ("text", "json"):
        print(f"sentinel: SENTINEL_LOG_FORMAT={args.log_format!r}: expected text or json",
              file=sys.stderr)
        return exitcodes.USAGE
    config = load_config_or_exit(args.config)
    if args.listen:
        from sentinel.config.model import split_listen

        if split_listen(args.listen) is None:
            print(f"sentinel: --listen {args.listen!r}: expected host:port, "
                  "e.g. 0.0.0.0:9465", file=sys.stderr)
            return exitcodes.USAGE
        config = config.model_copy(update={"listen": args.listen})
    # The same checks, lines and exit codes as `check config` (sentinel.preflight).
    pf = preflight(config, config_path(args.config), listen_flag=bool(args.listen))
    if pf.refused:
        print("\n".join(finding_lines(pf.refused)), file=sys.stderr)
        return exitcodes.CONFIG if pf.config_is_wrong else exitcodes.UNAVAILABLE
    said = [f for f in pf.findings if f.kind != NOTE] + [f for f in pf.findings if f.kind == NOTE]
    source = config_path(args.config)
    return run_daemon(config, args.log_level, args.log_format,
                      notes=finding_lines(said),
                      listen_key="--listen" if args.listen else "listen",
                      loader=config_loader(source, args.listen), source=source)


def cmd_demo(args: argparse.Namespace) -> int:
    """The scripted failures against the bundled simulators."""
    from sentinel.demo import run_demo

    return run_demo(keep=args.keep)
