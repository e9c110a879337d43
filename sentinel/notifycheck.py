"""`check config` says who is told what: critical alerts, warnings, and the "fixed" notice.

Read from the routing tree exactly as the dispatcher builds it (routes matched by
severity alone), so a newcomer learns before the first incident whether warnings
page someone, and whether anyone hears that Sentinel fixed a crash. Notes, and a
warning when warnings reach a PagerDuty receiver (a pager by construction).
"""

from __future__ import annotations

from sentinel.config import Config
from sentinel.findings import NOTE, WARNING, Finding

TIMELINE_ONLY = "no receiver (the web page and the incident timeline only)"


def who_is_told(config: Config) -> list[Finding]:
    """One note per kind of message; a warning when warnings page a PagerDuty receiver."""

    kinds = {r.name: next(k for k in ("webhook", "slack", "pagerduty", "alertmanager")
                          if getattr(r, k) is not None) for r in config.receivers}
    critical, warning = told(config, "critical"), told(config, "warning")
    key = "notify.route" if config.notify.route is not None else "receivers"
    out = [Finding(NOTE, key, f"critical alerts go to {_names(critical, kinds)}; warnings "
                   f"(Sentinel's own self-alerts among them) go to {_names(warning, kinds)}")]
    pagers = [r for r in warning if kinds.get(r) == "pagerduty"]
    if pagers:
        out.append(Finding(WARNING, key, f"warnings page {', '.join(pagers)} (PagerDuty): give "
                           "the root route matchers: ['severity=\"critical\"'] (warnings then "
                           "stay on the page), or a route sending severity=\"warning\" to a chat "
                           "receiver"))
    if config.remediation.policies:
        fixed = config.notify.act_first.receiver
        where = (f"receiver {fixed} ({kinds.get(fixed, '?')})" if fixed else
                 "nobody: the incident timeline only (set notify.act_first.receiver to a chat "
                 "receiver to be told)")
        out.append(Finding(NOTE, "notify.act_first.receiver",
                           f"a crash a policy fixes pages nobody; the \"fixed\" notice goes to "
                           f"{where}"))
    return out


def told(config: Config, severity: str) -> list[str]:
    """The receivers an alert of `severity` reaches (matched by severity alone)."""
    from sentinel.model import labels_of
    from sentinel.respond.notify.routing import build_route, match_routes

    route = build_route(config.notify.route, [r.name for r in config.receivers])
    if route is None:
        return []
    labels = labels_of({"alertname": "Any", "severity": severity})
    return sorted({r.receiver for r in match_routes(route, labels) if r.receiver})


def _names(receivers: list[str], kinds: dict[str, str]) -> str:
    if not receivers:
        return TIMELINE_ONLY
    return ", ".join(f"{r} ({kinds.get(r, '?')})" for r in receivers)
