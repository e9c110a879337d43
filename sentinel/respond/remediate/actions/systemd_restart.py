"""systemd_restart: `systemctl stop UNIT`, clear the stale libtpu lock file, `systemctl start UNIT`.

Argv lists, no shell; the check reports the XLA cache's warmth (the engine
judges the restart's expected cost). Stop and start are separate
so the lock file a crashed server left behind (see `tpu_lock.py`) is removed
while nothing runs; a start that fails (the chip still held) is retried with
backoff, `start_attempts` times. What was removed is in the outcome's data,
which the engine writes on the incident's timeline.
"""

from __future__ import annotations

import subprocess
import time

from sentinel.config.remediation import SystemdRestartConfig
from sentinel.respond.remediate.actions import tpu_lock
from sentinel.respond.remediate.actions.command import run_argv
from sentinel.respond.remediate.base import ActionContext, Check, Outcome, TemplateError, render
from sentinel.respond.remediate.guards import Reason
from sentinel.respond.remediate.restart_cost import GPU, KEY_WARM, KEY_WHY, TPU, UNKNOWN
from sentinel.respond.remediate.warm import facts, xla_facts


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
        path = p.xla_cache_path or ctx.target.xla_cache_path
        if ctx.target.accelerator == GPU or (ctx.target.accelerator != TPU and not path):
            data = facts(ctx.target.accelerator if ctx.target.accelerator == GPU else UNKNOWN,
                         None, f"unit {unit}: its caches are not where Sentinel looks")
        else:
            data = xla_facts(path)
        state = {True: "warm", False: "COLD", None: "warmth unknown"}[data[KEY_WARM]]
        return Check(True, f"systemctl restart {unit} ({state}: {data[KEY_WHY]})", data={
            **data, "stop_argv": [p.systemctl, "stop", "--", unit],
            "argv": [p.systemctl, "start", "--", unit]})

    def run(self, ctx: ActionContext) -> Outcome:
        """Stop, remove the lock file, start (retried with backoff); exit status 0 is success."""
        p: SystemdRestartConfig = ctx.params
        check = self.check(ctx)
        if not check.ok:
            return Outcome(False, check.summary, check.data)
        deadline = ctx.deadline()
        try:
            stopped = run_argv(check.data["stop_argv"], ctx.timeout_s, check.data)
            if not stopped.ok:
                return stopped
            data = {**check.data, **tpu_lock.clear_stale_lockfile(p.libtpu_lockfile)}
            delays = tpu_lock.backoff_delays()
            for attempt in range(1, p.start_attempts + 1):
                started = run_argv(check.data["argv"], max(0.1, deadline - time.monotonic()),
                                   data)
                if started.ok or attempt == p.start_attempts or time.monotonic() >= deadline:
                    break
                time.sleep(min(next(delays), max(0.0, deadline - time.monotonic())))
        except (OSError, subprocess.SubprocessError) as exc:
            return Outcome(False, f"systemctl failed to run: {exc}", check.data)
        out = {**started.data, "start_attempts": attempt}
        return Outcome(started.ok, started.detail + tpu_lock.describe(out), out)
