"""Alert names the config refers to, checked against the alerts that exist.

A remediation policy, a route or an inhibit rule that names an alert no rule
defines never matches anything: a typo silently disables it. `check config`
lists each such reference with its file:line and the nearest real name.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from sentinel.config import Config
from sentinel.config.load import format_path
from sentinel.config.notify import RouteConfig
from sentinel.re2match import RegexError, anchored
from sentinel.respond.notify.matchers import MatchOp, parse_matcher

# Alerts Sentinel raises itself, not defined by any rule file.
OWN_ALERTS = frozenset({"Watchdog", "SentinelRemediationRefused", "SentinelRemediationGaveUp"})

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class UnknownAlert:
    """A reference to an alert name that no loaded rule defines."""

    path: KeyPath
    name: str
    suggestion: str | None

    def message(self, file: str, line: int | None) -> str:
        where = f"{file}:{line}" if line else file
        key = format_path(self.path)
        hint = f"; did you mean {self.suggestion!r}?" if self.suggestion else ""
        return f"{where}: {key}: alert {self.name!r} is defined by no loaded rule{hint}"


def unknown_alert_refs(config: Config, defined: Iterable[str]) -> list[UnknownAlert]:
    """Every reference in remediation policies, routes and inhibit rules to an unknown alert."""
    known = set(defined) | OWN_ALERTS
    out = []
    for path, kind, value in _references(config):
        if kind == "name" and value not in known:
            out.append(UnknownAlert(path, value, _nearest(value, known)))
        elif kind == "regex" and not any(_full_match(value, k) for k in known):
            out.append(UnknownAlert(path, f"=~{value}", None))
    return out


def _references(config: Config) -> Iterator[tuple[KeyPath, str, str]]:
    for i, policy in enumerate(config.remediation.policies):
        for j, name in enumerate(policy.alerts):
            yield ("remediation", "policies", i, "alerts", j), "name", name
    if config.notify.route is not None:
        yield from _route_refs(config.notify.route, ("notify", "route"))
    # The shipped inhibitions (notify.inhibit_rules left out) name the shipped alerts; a
    # config with its own rules may have none of them, and that is no mistake of its own.
    shipped = "inhibit_rules" not in config.notify.model_fields_set
    for i, rule in enumerate(() if shipped else config.notify.inhibit_rules):
        for side in ("source_matchers", "target_matchers"):
            yield from _matcher_refs(getattr(rule, side), ("notify", "inhibit_rules", i, side))


def _route_refs(route: RouteConfig, path: KeyPath) -> Iterator[tuple[KeyPath, str, str]]:
    yield from _matcher_refs(route.matchers, (*path, "matchers"))
    for i, child in enumerate(route.routes):
        yield from _route_refs(child, (*path, "routes", i))


def _matcher_refs(texts: Iterable[str], path: KeyPath) -> Iterator[tuple[KeyPath, str, str]]:
    for j, text in enumerate(texts):
        m = parse_matcher(text)
        if m.name != "alertname":
            continue
        if m.op is MatchOp.EQ:
            yield (*path, j), "name", m.value
        elif m.op is MatchOp.RE:
            yield (*path, j), "regex", m.value


def _full_match(pattern: str, name: str) -> bool:
    try:
        return anchored(pattern).matches(name)
    except RegexError:
        return False


def _nearest(name: str, known: set[str]) -> str | None:
    by_case = {k.lower(): k for k in known}
    if name.lower() in by_case:
        return by_case[name.lower()]
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return close[0] if close else None


def format_refs(refs: list[UnknownAlert], file: str,
                line_of: Callable[[KeyPath], int | None]) -> list[str]:
    """One line per reference, in file order."""
    placed = sorted(((line_of(r.path), r) for r in refs), key=lambda p: p[0] or 0)
    return [r.message(file, line) for line, r in placed]
