"""`sentinel remediate INCIDENT_ID ACTION [--dry-run]`: one action by hand, through the same guards.

The incident's alert must fall under a policy that lists ACTION as a step:
nothing runs that the response policy does not allow. The run pins that
step (its own attempt count does not apply: a person asked), but every
other guard holds (cooldown, budget, concurrency, backoff, breaker,
silences, dry-run), the intent is written first, and the decision, outcome
and verification go on the incident timeline like the daemon's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sentinel import exitcodes
from sentinel.cli.common import database, load_config_or_exit

if TYPE_CHECKING:
    from sentinel.config.remediation import PolicyConfig


class _ActionKinds:
    """The action kinds, read from the config models only when argparse checks a value.

    Building the parser for `sentinel --help` must not import pydantic and the
    remediation models (bench/cli.py); `choices` is only consulted when the
    `remediate` subcommand parses or prints its own help.
    """

    def _kinds(self) -> tuple[str, ...]:
        from sentinel.config.remediation import ACTION_KINDS

        return ACTION_KINDS

    def __contains__(self, value: object) -> bool:
        return value in self._kinds()

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds())


def add_parser(sub: Any) -> None:
    """Register `sentinel remediate` on the CLI's subparsers."""
    p = sub.add_parser(
        "remediate", help="run one remediation action by hand, through the guards",
        description="Run ACTION for an incident through the response policy's guards; the "
        "decision, intent, outcome and verification go on the incident timeline. Exit 0 when "
        "the action ran and was verified (or, with --dry-run, would run); 1 when refused or "
        "failed; 2 when no policy allows ACTION for the incident.")
    p.add_argument("-c", "--config", default=None, help="config file (sentinel.yaml)")
    p.add_argument("--database", help="database URL (overrides the config's)")
    p.add_argument("incident", type=int, metavar="INCIDENT_ID")
    p.add_argument("action", choices=_ActionKinds(), metavar="ACTION",
                   help="one of %(choices)s")
    p.add_argument("--dry-run", action="store_true", help="decide and record; do nothing")
    p.add_argument("--reset-breaker", action="store_true",
                   help="close the target's breaker and forget its failures first")
    p.set_defaults(func=run_remediate)


def _policy_for(policies: tuple[PolicyConfig, ...], alertname: str, labels: dict[str, str],
                target: str, action: str) -> tuple[PolicyConfig, int] | None:
    for policy in policies:
        if policy.applies_to(alertname, labels, target):
            for i, step in enumerate(policy.steps):
                if step.kind == action:
                    return policy, i
    return None


def run_remediate(args: argparse.Namespace) -> int:
    """The command: find the policy step, run it through the engine, print what happened."""
    from sentinel.daemon.receivers import build_receivers
    from sentinel.incidents import queries
    from sentinel.incidents.convert import dt_to_ms
    from sentinel.incidents.tracker import IncidentTracker
    from sentinel.respond.remediate import state
    from sentinel.respond.remediate.engine import Candidate, Prepared
    from sentinel.respond.remediate.pager import NotifyPager, receivers_notify
    from sentinel.respond.remediate.wiring import build_engine

    config = load_config_or_exit(args.config)
    db = database(args)
    detail = queries.get_incident(db, args.incident)
    if detail is None:
        print(f"sentinel: no incident {args.incident}", file=sys.stderr)
        return exitcodes.FAILURE
    inc = detail.incident
    firing = [a for a in detail.alerts if a.state == "firing"] or list(detail.alerts)
    labels = dict(firing[-1].labels) if firing else dict(detail.labels)
    found = _policy_for(config.remediation.policies, inc.alertname, labels, inc.target,
                        args.action)
    if found is None:
        print(f"sentinel: no remediation policy allows {args.action} for {inc.alertname} on "
              f"{inc.target or '(no target)'}", file=sys.stderr)
        return exitcodes.CONFIG
    policy, step = found
    tracker = IncidentTracker(db)
    engine = build_engine(config, db, NotifyPager(receivers_notify(build_receivers(config),
                                                                   tracker),
                                                  lambda: int(engine.now_ms())))
    if args.reset_breaker:
        state.reset_target(db, inc.target, engine.now_ms())
        state.record(db, inc.id, engine.now_ms(), f"breaker reset on {inc.target} by hand",
                     {"phase": "breaker", "target": inc.target, "reset": True, "manual": True})
    candidate = Candidate(inc.id, inc.alertname, inc.target, labels, policy,
                          dt_to_ms(inc.opened_at))
    prepared = engine.prepare(candidate, manual=True, force_dry_run=args.dry_run, step=step)
    if not isinstance(prepared, Prepared):
        d = prepared.decision
        verb = "would" if str(d.reason) == "dry_run" else "refused:"
        print(f"{args.action} on {inc.target}: {verb} {prepared.detail or d.reason}"
              + ("" if prepared.detail else f" ({d.detail})"))
        return 0 if str(d.reason) == "dry_run" else 1
    print(f"{args.action} on {inc.target}: attempt #{prepared.attempt_id} running ...",
          flush=True)
    result = engine.execute(prepared)
    print(f"{args.action} on {inc.target}: {'succeeded' if result.ok else 'FAILED'}: "
          f"{result.detail}")
    return 0 if result.ok else 1
