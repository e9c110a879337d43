"""command: an allow-listed argv template with `{label}` substitution, run without a shell.

For sites with their own tooling (`/usr/local/bin/vllm-ctl restart {target}`).
argv[0] was checked against `remediation.command_allowlist` when the config
loaded; label values are plain names only (see `base.render`), so an alert
cannot add an option or a path. Exit status 0 is success; output is kept
(bounded) for the timeline.
"""

from __future__ import annotations

import subprocess
from typing import Any

from sentinel.config.remediation import CommandConfig
from sentinel.respond.remediate.base import ActionContext, Check, Outcome, TemplateError, render
from sentinel.respond.remediate.guards import Reason

OUTPUT_LIMIT = 2000


def run_argv(argv: list[str], timeout_s: float, data: dict[str, Any]) -> Outcome:
    """Run argv (no shell) with a timeout; Outcome with exit status and output tails."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return Outcome(False, f"{argv[0]} timed out after {timeout_s:g}s", data)
    out = {**data, "exit_code": proc.returncode, "stdout": proc.stdout[-OUTPUT_LIMIT:],
           "stderr": proc.stderr[-OUTPUT_LIMIT:]}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [""])[-1][:200]
        return Outcome(False, f"{argv[0]} exited {proc.returncode}: {last}".rstrip(": "), out)
    return Outcome(True, f"{' '.join(argv)} exited 0", out)


class Command:
    """The command action."""

    kind = "command"

    def check(self, ctx: ActionContext) -> Check:
        """The argv rendered from the template; no side effect."""
        p: CommandConfig = ctx.params
        try:
            argv = [p.argv[0], *(render(a, ctx.labels) for a in p.argv[1:])]
        except TemplateError as exc:
            return Check.refuse(Reason.PRECONDITION, str(exc))
        return Check(True, f"run {' '.join(argv)}", data={"argv": argv})

    def run(self, ctx: ActionContext) -> Outcome:
        """Run the argv."""
        check = self.check(ctx)
        if not check.ok:
            return Outcome(False, check.summary, check.data)
        try:
            return run_argv(check.data["argv"], ctx.timeout_s, check.data)
        except (OSError, subprocess.SubprocessError) as exc:
            return Outcome(False, f"{check.data['argv'][0]} failed to run: {exc}", check.data)
