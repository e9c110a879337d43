"""Whether a new incident's page waits while Sentinel acts, and for how long (issue 33).

The tracker asks when an incident opens. The answer comes from the remediation
engine's own policy matching (`dispatch.match`): a policy that covers the alert
and can act for real (not a dry run) holds the page for its first step's
`timeout` + `verify_deadline`, never longer than `notify.act_first.grace`.
Whether the guards let it run is the engine's next decision (`Engine.prepare`),
moments later: a refusal releases the page at once (`Pager.not_fixed`), so a
page is never held for an action that will not run. A policy that needs
approval parks its action then, which releases the page with the approval's
links in it: the approval page is folded into the incident's own.
"""

from __future__ import annotations

from sentinel.config import Config
from sentinel.incidents.tracker import ActFirst
from sentinel.model import Alert
from sentinel.respond.remediate.dispatch import match


def act_first(config: Config) -> ActFirst | None:
    """The tracker's act-first question for this config; None when nothing can act."""
    cap = config.notify.act_first.grace_ms
    remediation = config.remediation
    if cap <= 0 or not remediation.policies or remediation.dry_run:
        return None

    def grace(alert: Alert) -> tuple[int, str] | None:
        for _, i in match(remediation, [alert]):
            policy = remediation.policies[i]
            if policy.dry_run:
                continue  # nothing will act: page as before
            # Approval required: the hold ends at once when the action is parked, and the
            # approval page (its links) is folded into the incident's own page: one page.
            step = policy.steps[0]
            wait = min(cap, step.timeout_ms + step.verify_deadline_ms)
            return wait, f"policy {policy.name} ({step.kind}) acts on {alert.name}"
        return None

    return grace
