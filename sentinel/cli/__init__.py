"""The `sentinel` command: parses arguments and calls the App or a service function.

Nothing here decides anything. One module per command group registers its
subcommands (`add_parser(sub)`) and holds their handlers, each a few lines
that hand off to the module that does the work:

    run.py        run, demo              check.py      check config, rules check|test
    sim.py        sim                    incidents.py  incidents list|show, db upgrade
    remediate.py  remediate              logs.py       logs classify
    diagnose.py   diagnose               silence.py    silence add|list|expire
    api.py        approvals, mcp         common.py     --config/--database and how they are read
    completion.py completion bash|zsh    verdicts.py   verdicts list|promote
    init.py       init (a first config, the examples)

The stages never import from here. Building the parser imports nothing but
argparse and these modules: handlers import what they need when they run, so
`sentinel --help` starts fast (bench/cli.py).
"""

from __future__ import annotations

import sys

if sys.argv[1:2] == ["run"]:
    # The console script imports this module first: hold SIGHUP before anything else
    # is imported, so a reload sent while the daemon starts is queued, not fatal. What
    # is left is the interpreter's own start-up (docs/how-to/run-as-a-service.md).
    from sentinel.daemon.startsignals import hold_sighup

    hold_sighup()

import argparse  # noqa: E402 (after the signal handler, on purpose)
import os  # noqa: E402

from sentinel import exitcodes  # noqa: E402
from sentinel.cli import (
    api,
    check,
    completion,
    diagnose,
    incidents,
    init,
    logs,
    remediate,
    run,
    silence,
    sim,
    verdicts,
)

EPILOG = """\
examples:
  sentinel init --url http://10.0.0.5:8000   # a first config for your servers
  sentinel demo                          # scripted failures against the bundled simulators
  sentinel run -c sentinel.yaml          # the daemon
  sentinel check config sentinel.yaml    # validate a config file
  sentinel rules test rules/vllm_test.yaml
  sentinel incidents list --status open
  sentinel logs classify /var/log/vllm.log   # crash signatures in a log file
  sentinel diagnose 42                   # ask the model for a runbook of incident 42
  sentinel silence add target=gemma-26b -d 2h -C "maintenance"
  source <(sentinel completion bash)     # tab completion (bash, zsh)
"""


class _VersionAction(argparse.Action):
    """`--version`, with the build info computed only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from sentinel.buildinfo import version_line

        print(version_line())
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the process exit code (tests call this in-process)."""
    return _run(argv)[0]


def console() -> None:
    """The console script and `python -m sentinel`: main(), then exit.

    A read-only command (marked `quick_exit` by its group) ends with os._exit
    once its output is flushed: tearing down an interpreter that imported
    SQLAlchemy costs about 0.1 s (bench/cli.py), longer than the query. Those
    commands leave no thread, temporary file or buffered log behind; every
    other command exits normally.
    """
    code, quick = _run(None)
    if quick:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:
            pass
        os._exit(code)
    raise SystemExit(code)


def _run(argv: list[str] | None) -> tuple[int, bool]:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return exitcodes.USAGE, False
    return _call(args), bool(getattr(args, "quick_exit", False))


def _call(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return exitcodes.INTERRUPTED
    except BrokenPipeError:
        return exitcodes.OK
    except _database_error() as exc:
        # No database there, an old schema, or unreachable: one clear line, no traceback
        # (DatabaseError never carries the password).
        print(f"sentinel: {exc}", file=sys.stderr)
        return exitcodes.UNAVAILABLE
    except ValueError as exc:
        print(f"sentinel: {exc}", file=sys.stderr)
        return exitcodes.FAILURE


def _database_error() -> type[Exception]:
    """DatabaseError when sentinel.incidents.db was imported (only then can it be raised)."""
    db = sys.modules.get("sentinel.incidents.db")
    return db.DatabaseError if db is not None else _NeverRaised


class _NeverRaised(Exception):
    """Stands for DatabaseError in an `except` when the database module was never imported."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    p = argparse.ArgumentParser(
        prog="sentinel",
        description="Sentinel watches vLLM servers: scrapes /metrics, evaluates Prometheus "
        "alerting rules, records incidents, asks the self-hosted model for runbooks, "
        "remediates within guards and pages on-call.",
        epilog=EPILOG + "\n" + exitcodes.help_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action=_VersionAction, nargs=0,
                   help="print the version, commit, Python and platform, and exit")
    sub = p.add_subparsers(title="commands", metavar="COMMAND")
    init.add_parser(sub)
    run.add_parser(sub)
    sim.add_parser(sub)
    remediate.add_parser(sub)
    verdicts.add_parser(sub)
    check.add_parser(sub)
    incidents.add_parser(sub)
    logs.add_parser(sub)
    diagnose.add_parser(sub)
    silence.add_parser(sub)
    api.add_parser(sub)
    incidents.add_db_parser(sub)
    completion.add_parser(sub, p)
    return p
