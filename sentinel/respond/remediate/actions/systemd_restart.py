"""systemd_restart: `systemctl restart UNIT` (an argv list, no shell) after the warm-cache check."""

from __future__ import annotations

import subprocess

from sentinel.config_remediation import SystemdRestartConfig
from sentinel.respond.remediate.actions.command import run_argv
from sentinel.respond.remediate.base import ActionContext, Check, Outcome, TemplateError, render
from sentinel.respond.remediate.guards import Reason
from sentinel.respond.remediate.warm import warm_check


class SystemdRestart:
    """The systemd_restart action."""

    kind = "systemd_restart"

    def check(self, ctx: ActionContext) -> Check:
        """The unit name rendered, the cache checked; no side effect."""
        p: SystemdRestartConfig = ctx.params
        try:
            unit = render(p.unit, ctx.labels)
        except TemplateError as exc:
            return Check.refuse(Reason.PRECONDITION, str(exc))
        if unit.startswith("-"):
            return Check.refuse(Reason.PRECONDITION, f"unit name {unit!r} looks like an option")
        path = p.xla_cache_path or ctx.target.xla_cache_path or ""
        argv = [p.systemctl, "restart", "--", unit]
        check = warm_check(path, ctx.allow_cold, f"systemctl restart {unit}")
        return Check(check.ok, check.summary, check.reason, {**check.data, "argv": argv})

    def run(self, ctx: ActionContext) -> Outcome:
        """Run systemctl; exit status 0 is success."""
        check = self.check(ctx)
        if not check.ok:
            return Outcome(False, check.summary, check.data)
        try:
            return run_argv(check.data["argv"], ctx.timeout_s, check.data)
        except (OSError, subprocess.SubprocessError) as exc:
            return Outcome(False, f"systemctl failed to run: {exc}", check.data)
