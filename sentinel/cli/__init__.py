"""The `sentinel` command: parses arguments and calls the App or a service function.

Nothing here decides anything; every subcommand is a few lines that hand off
to the module that does the work.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

DEFAULT_CONFIG = "sentinel.yaml"

EPILOG = """\
examples:
  sentinel demo                          # scripted incident against the bundled simulator
  sentinel run -c sentinel.yaml          # the daemon
  sentinel check config sentinel.yaml    # validate a config file
  sentinel rules test rules/vllm_test.yaml
  sentinel incidents list --status open
  sentinel logs classify /var/log/vllm.log   # crash signatures in a log file
  sentinel diagnose 42                   # ask the model for a runbook of incident 42
  sentinel silence add target=gemma-26b -d 2h -C "maintenance"
"""


class _VersionAction(argparse.Action):
    """`--version`, with the build info computed only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from sentinel.buildinfo import version_line

        print(version_line())
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from sentinel.incidents.db import DatabaseError

    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except (DatabaseError, ValueError) as exc:
        # Bad arguments or an unreachable database: one clear line, no traceback
        # (DatabaseError never carries the password).
        print(f"sentinel: {exc}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    p = argparse.ArgumentParser(
        prog="sentinel",
        description="Sentinel watches vLLM servers: scrapes /metrics, evaluates Prometheus "
        "alerting rules, records incidents, asks the self-hosted model for runbooks, "
        "remediates within guards and pages on-call.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action=_VersionAction, nargs=0,
                   help="print the version, commit, Python and platform, and exit")
    sub = p.add_subparsers(title="commands", metavar="COMMAND")

    run = sub.add_parser("run", help="run the daemon",
                         description="Run the daemon until SIGTERM/SIGINT; SIGHUP reloads rules.")
    _config_arg(run)
    run.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    run.add_argument("--log-format", choices=("text", "json"),
                     default=os.environ.get("SENTINEL_LOG_FORMAT", "text"),
                     help="text (default) or json: one object a line with incident, target "
                     "and alertname as fields, for log pipelines (env SENTINEL_LOG_FORMAT)")
    run.add_argument("--listen", metavar="HOST:PORT", default=os.environ.get("SENTINEL_LISTEN"),
                     help="address for /metrics, /healthz and the API, overriding the config's "
                     "`listen` (env SENTINEL_LISTEN; the container image sets 0.0.0.0:9465)")
    run.set_defaults(func=_cmd_run)

    demo = sub.add_parser("demo", help="scripted incident against the bundled simulator",
                          description="Start the simulator and the daemon (SQLite in a temporary "
                          "folder) on free ports, drive a queue backlog and its recovery, print "
                          "the incident timeline as it happens. Exits 0 when the incident opened "
                          "and resolved.")
    demo.add_argument("--keep", action="store_true", help="keep the temporary folder")
    demo.set_defaults(func=_cmd_demo)

    sim = sub.add_parser("sim", help="vLLM-compatible simulator server",
                         description="Serve a vLLM-compatible API (/metrics, /health, /v1/models, "
                         "/v1/chat/completions, /tokenize) with a control API at /sim/state.")
    sim.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    sim.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any free)")
    sim.add_argument("--model", default=None, help="served model name (default a Gemma 4 id)")
    sim.add_argument("--max-model-len", type=int, default=16384,
                     help="context length in tokens (default 16384)")
    sim.add_argument("--engines", type=int, default=1,
                     help="data-parallel engines, one series each (default 1)")
    sim.set_defaults(func=_cmd_sim)
    from sentinel.cli.remediate import add_remediate_parser
    from sentinel.cli.sim import add_container_args

    add_container_args(sim)
    add_remediate_parser(sub)

    check = sub.add_parser("check", help="validate configuration").add_subparsers(
        title="what", metavar="WHAT")
    cc = check.add_parser("config", help="validate a config file and the rule files it names",
                          description="Exit 0 when valid; else every problem as FILE:LINE: KEY.")
    cc.add_argument("file", nargs="?", default=DEFAULT_CONFIG, help="config file (sentinel.yaml)")
    cc.add_argument("--strict", action="store_true",
                    help="fail when a remediation policy, route or inhibit rule names an alert "
                    "that no loaded rule defines (a warning otherwise)")
    cc.add_argument("--scrape", action="store_true",
                    help="also scrape every target once; exit 1 when a rule selects a metric "
                    "no target exposes (naming the replacement of a renamed vLLM metric)")
    cc.set_defaults(func=_cmd_check_config)

    rules = sub.add_parser("rules", help="check or unit-test rule files").add_subparsers(
        title="what", metavar="WHAT")
    rc = rules.add_parser("check", help="validate rule files like `promtool check rules`")
    rc.add_argument("files", nargs="+", metavar="FILE")
    rc.set_defaults(func=_cmd_rules_check)
    rt = rules.add_parser("test", help="run rule unit tests in promtool's test-file format")
    rt.add_argument("files", nargs="+", metavar="FILE")
    rt.set_defaults(func=_cmd_rules_test)

    inc = sub.add_parser("incidents", help="query incident history").add_subparsers(
        title="what", metavar="WHAT")
    il = inc.add_parser("list", help="list incidents, newest first")
    _db_args(il)
    il.add_argument("--status", choices=["open", "resolved"], help="only this status")
    il.add_argument("--alertname", help="only incidents of this alert")
    il.add_argument("--target", help="only incidents of this target")
    il.add_argument("--since", type=_since, metavar="WHEN",
                    help="only incidents opened since WHEN: a duration ago (1h, 7d) or an "
                    "ISO-8601 time")
    il.add_argument("--limit", type=int, default=50, help="at most this many, 1-1000 (default 50)")
    il.add_argument("--json", action="store_true", help="machine-readable output")
    il.set_defaults(func=_cmd_incidents_list)
    ish = inc.add_parser("show", help="one incident with its alerts and timeline")
    _db_args(ish)
    ish.add_argument("id", type=int, help="incident id")
    ish.add_argument("--json", action="store_true", help="machine-readable output")
    ish.set_defaults(func=_cmd_incidents_show)

    logs = sub.add_parser("logs", help="crash signatures in logs").add_subparsers(
        title="what", metavar="WHAT")
    lc = logs.add_parser(
        "classify", help="run the crash signatures over log files and print the events",
        description="Run the crash signatures (rules/signatures.yaml) over log files\n"
        "or stdin. "
        "Prints one line per event: CATEGORY SIGNATURE LINE (the file name first when\n"
        "several files are given); a multi-line traceback is one event.\n"
        "Exit status: 0 when every file was read (events or not), 2 when a file could\n"
        "not be read or the signature file is invalid.",
        epilog="examples:\n  sentinel logs classify /var/log/vllm.log\n"
        "  docker logs vllm 2>&1 | sentinel logs classify -\n"
        "  sentinel logs classify --json a.log b.log",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    lc.add_argument("files", nargs="+", metavar="FILE", help="log file, or - for stdin")
    lc.add_argument("--json", action="store_true",
                    help="print a JSON array of objects (file, line, category, signature, "
                    "severity, excerpt)")
    lc.add_argument("--signatures", metavar="FILE",
                    help="signature file (default: the bundled rules/signatures.yaml)")
    lc.set_defaults(func=_cmd_logs_classify)

    from sentinel.cli.diagnose import add_parser as add_diagnose

    add_diagnose(sub, _config_arg)

    from sentinel.cli import silence as silence_cli

    silence_cli.add_parser(sub, _db_args, _database)

    from sentinel.cli import api as api_cli

    api_cli.add_parser(sub, _db_args, _database, _load_config_or_exit)

    db = sub.add_parser("db", help="database schema").add_subparsers(title="what", metavar="WHAT")
    du = db.add_parser("upgrade", help="apply migrations (alembic upgrade head)")
    _db_args(du)
    du.set_defaults(func=_cmd_db_upgrade)
    return p


def _config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", default=None,
                   help=f"config file (default ./{DEFAULT_CONFIG} if present, else built-in "
                   "defaults)")


def _db_args(p: argparse.ArgumentParser) -> None:
    _config_arg(p)
    p.add_argument("--database", help="database URL (overrides the config's)")


# -- commands ---------------------------------------------------------------


def _cmd_run(args: argparse.Namespace) -> int:
    from sentinel.daemon.run import run_daemon

    if args.log_format not in ("text", "json"):
        print(f"sentinel: SENTINEL_LOG_FORMAT={args.log_format!r}: expected text or json",
              file=sys.stderr)
        return 2
    config = _load_config_or_exit(args.config)
    if args.listen:
        from sentinel.config.model import split_listen

        if split_listen(args.listen) is None:
            print(f"sentinel: --listen {args.listen!r}: expected host:port, "
                  "e.g. 0.0.0.0:9465", file=sys.stderr)
            return 2
        config = config.model_copy(update={"listen": args.listen})
    return run_daemon(config, args.log_level, args.log_format)


def _cmd_demo(args: argparse.Namespace) -> int:
    from sentinel.demo import run_demo

    return run_demo(keep=args.keep)


def _cmd_sim(args: argparse.Namespace) -> int:
    from sentinel.sim.server import serve_forever_cli

    kwargs = {"host": args.host, "port": args.port, "max_model_len": args.max_model_len,
              "engines": args.engines}
    if args.model:
        kwargs["model"] = args.model
    if args.docker_socket:
        from sentinel.cli.sim import container_spec

        kwargs.update(docker_socket=args.docker_socket, container=container_spec(args))
    serve_forever_cli(**kwargs)
    return 0


def _cmd_check_config(args: argparse.Namespace) -> int:
    from sentinel.checks import check_config

    return check_config(args.file, sys.stdout, sys.stderr, strict=args.strict,
                        scrape=args.scrape)


def _cmd_rules_check(args: argparse.Namespace) -> int:
    from sentinel.rules.check import check_rule_files

    return check_rule_files(args.files, sys.stdout)


def _cmd_rules_test(args: argparse.Namespace) -> int:
    from sentinel.rules.ruletest import run_rule_tests

    return run_rule_tests(args.files, sys.stdout)


def _cmd_logs_classify(args: argparse.Namespace) -> int:
    from sentinel.cli.logs import classify_files

    return classify_files(args.files, args.json, sys.stdout, signatures=args.signatures)


def _cmd_incidents_list(args: argparse.Namespace) -> int:
    from sentinel.incidents import queries, render

    db = _database(args)
    items = queries.list_incidents(db, status=args.status, alertname=args.alertname,
                                   target=args.target, since=args.since, limit=args.limit)
    if args.json:
        print(json.dumps(render.list_json(items), indent=2))
    else:
        print(render.render_list(items))
    return 0


def _cmd_incidents_show(args: argparse.Namespace) -> int:
    from sentinel.incidents import queries, render

    detail = queries.get_incident(_database(args), args.id)
    if detail is None:
        print(f"sentinel: no incident {args.id}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(render.detail_json(detail), indent=2))
    else:
        print(render.render_detail(detail))
    return 0


def _cmd_db_upgrade(args: argparse.Namespace) -> int:
    _database(args, upgrade=True)
    print("database schema is up to date")
    return 0


# -- helpers ----------------------------------------------------------------


def _since(text: str) -> datetime:
    """`--since`: a Prometheus duration ago, or an ISO-8601 time (UTC when no zone is given)."""
    from sentinel.config.durations import parse_duration

    try:
        return datetime.now(tz=UTC) - timedelta(milliseconds=parse_duration(text))
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a duration (1h, 7d) or ISO-8601 time: {text!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _load_config_or_exit(path: str | None):  # noqa: ANN202 (sentinel.config.Config)
    from sentinel.config import Config, ConfigError, load_config

    if path is None and not Path(DEFAULT_CONFIG).exists():
        return Config.default()
    try:
        return load_config(path or DEFAULT_CONFIG)
    except ConfigError as exc:
        print(f"sentinel: invalid configuration:\n{exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as exc:
        print(f"sentinel: cannot read config: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _database(args: argparse.Namespace, upgrade: bool = False):  # noqa: ANN202
    """The database of `--database`, else of the config's `database` key.

    Only `sentinel db upgrade` (upgrade=True) creates or migrates; every other
    command needs an existing database at the current schema, and reads nothing
    of the config but its `database` key (so no receiver secret must be set).
    """
    from sentinel.config import ConfigError
    from sentinel.config.load import load_database_url
    from sentinel.config.model import DEFAULT_DATABASE
    from sentinel.incidents.db import Database, open_existing

    url = args.database
    if not url:
        path = args.config or (DEFAULT_CONFIG if Path(DEFAULT_CONFIG).exists() else None)
        try:
            url = load_database_url(path) if path else DEFAULT_DATABASE
        except ConfigError as exc:
            print(f"sentinel: invalid configuration:\n{exc}", file=sys.stderr)
            raise SystemExit(2) from None
        except OSError as exc:
            print(f"sentinel: cannot read config: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    if upgrade:
        db = Database(url)
        db.upgrade()
        return db
    return open_existing(url)
