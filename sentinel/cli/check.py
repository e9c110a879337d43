"""`sentinel check config` and `sentinel rules check|test` (promtool's checks, for Sentinel)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sentinel.cli.common import DEFAULT_CONFIG
from sentinel.cli.completion import files


def add_parser(sub: Any) -> None:
    """Register `check` and `rules`."""
    check = sub.add_parser("check", help="validate configuration").add_subparsers(
        title="what", metavar="WHAT")
    cc = check.add_parser("config", help="pre-flight: everything `run` would refuse, refused "
                          "here first",
                          description="Validate a config file, the rule files it names, and "
                          "what `run` needs of this host (database, listen address, files). "
                          "Exit 0 when `run` would start; else every problem as "
                          "FILE:LINE: KEY: message and the fix, with `run`'s exit code "
                          "(3: the configuration, 4: this host).")
    files(cc.add_argument("file", nargs="?", default=DEFAULT_CONFIG,
                          help="config file (sentinel.yaml)"))
    cc.add_argument("--strict", action="store_true",
                    help="fail when a remediation policy, route or inhibit rule names an alert "
                    "that no loaded rule defines (a warning otherwise)")
    cc.add_argument("--scrape", action="store_true",
                    help="also scrape every target once; exit 1 when a rule selects a metric "
                    "no target exposes (naming the replacement of a renamed vLLM metric)")
    cc.add_argument("--network", action="store_true",
                    help="also reach every model endpoint (GET /v1/models) and receiver (a "
                    "TCP connection, nothing sent); exit 4 when one does not answer")
    cc.add_argument("--offline", action="store_true",
                    help="skip the checks that ask this host (database, listen address, log "
                    "files): for a config written for another machine")
    cc.set_defaults(func=cmd_check_config)

    rules = sub.add_parser("rules", help="check or unit-test rule files").add_subparsers(
        title="what", metavar="WHAT")
    rc = rules.add_parser("check", help="validate rule files like `promtool check rules`")
    files(rc.add_argument("files", nargs="+", metavar="FILE"))
    _feature_flag(rc)
    rc.set_defaults(func=cmd_rules_check, quick_exit=True)
    rt = rules.add_parser("test", help="run rule unit tests in promtool's test-file format")
    files(rt.add_argument("files", nargs="+", metavar="FILE"))
    rt.add_argument("--promql", type=int, choices=(2, 3), default=3, metavar="2|3",
                    help="PromQL semantics: 3 (Prometheus 3, left-open range windows; "
                         "the default) or 2 (Prometheus 2.x, as the Debian promtool 2.42)")
    _feature_flag(rt)
    rt.set_defaults(func=cmd_rules_test, quick_exit=True)


def _feature_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--enable-feature", action="append", default=[], metavar="NAME",
                        dest="features",
                        help="experimental PromQL, as promtool's: promql-experimental-functions, "
                             "promql-duration-expr, promql-binop-fill-modifiers, "
                             "promql-extended-range-selectors (comma-separated or repeated)")


def _features(args: argparse.Namespace) -> frozenset[str]:
    from sentinel.promql.features import check

    return check(frozenset(f.strip() for arg in args.features for f in arg.split(",") if f))


def cmd_check_config(args: argparse.Namespace) -> int:
    """Validate the config and its rule files."""
    from sentinel.checks import check_config

    return check_config(args.file, sys.stdout, sys.stderr, strict=args.strict,
                        scrape=args.scrape, offline=args.offline,
                        network=args.network)


def cmd_rules_check(args: argparse.Namespace) -> int:
    """Validate rule files."""
    from sentinel.rules.check import check_rule_files

    try:
        features = _features(args)
    except ValueError as e:
        print(f"sentinel: {e}", file=sys.stderr)
        return 2
    return check_rule_files(args.files, sys.stdout, features)


def cmd_rules_test(args: argparse.Namespace) -> int:
    """Run rule unit tests."""
    from sentinel.rules.ruletest import run_rule_tests

    try:
        features = _features(args)
    except ValueError as e:
        print(f"sentinel: {e}", file=sys.stderr)
        return 2
    return run_rule_tests(args.files, sys.stdout, semantics=args.promql, features=features)
