"""xla_cache_backup: copy the XLA cache to a durable path, or restore it from there.

The cache often lives in /dev/shm, which a node restart empties. A backup
taken while the server runs warm, restored before the next start, lets even
a node restart come back warm (docker_restart's `restore_from` does the
restore itself when it finds the cache cold).
"""

from __future__ import annotations

from sentinel.config.remediation import XlaCacheBackupConfig
from sentinel.respond.remediate.base import ActionContext, Check, Outcome
from sentinel.respond.remediate.cachecopy import copy_tree
from sentinel.respond.remediate.guards import Reason
from sentinel.respond.remediate.warm import warm_check


class XlaCacheBackup:
    """The xla_cache_backup action (backup or restore)."""

    kind = "xla_cache_backup"

    def _paths(self, ctx: ActionContext) -> tuple[str, str]:
        p: XlaCacheBackupConfig = ctx.params
        cache = p.source or ctx.target.xla_cache_path or ""
        return (cache, p.durable) if p.direction == "backup" else (p.durable, cache)

    def check(self, ctx: ActionContext) -> Check:
        """The source must be a warm cache: copying an empty one would destroy a good copy."""
        src, dst = self._paths(ctx)
        what = f"copy XLA cache {src} → {dst}"
        check = warm_check(src, allow_cold=False, what=what)
        if not check.ok:
            return Check.refuse(Reason.PRECONDITION, f"{what}: source is not a warm cache",
                                **check.data)
        return Check(True, what, data={"from": src, "to": dst, "files": check.data["cache_files"]})

    def run(self, ctx: ActionContext) -> Outcome:
        """Copy the tree, replacing the destination only once the copy is complete."""
        check = self.check(ctx)
        if not check.ok:
            return Outcome(False, check.summary, check.data)
        try:
            n = copy_tree(check.data["from"], check.data["to"])
        except OSError as exc:
            return Outcome(False, f"copy failed: {exc}", check.data)
        return Outcome(True, f"copied {n} files to {check.data['to']}", {**check.data, "copied": n})
