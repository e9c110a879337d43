"""tpu_node_restart: stop, then start, the target's Cloud TPU node through google-cloud-tpu.

The cold last resort: a node restart empties /dev/shm (where the XLA cache
often lives) and the server compiles again for tens of minutes, so a policy
reaches this step only after its warm restart steps failed, and only with
`allow_cold: true`. Sentinel never deletes a node or a queued resource: this
file calls `stop_node` and `start_node` and nothing else. Each is a
long-running operation, awaited within the step's time budget.
"""

from __future__ import annotations

import time
from typing import Any

from sentinel.collect.tpu import make_tpu_client
from sentinel.config.remediation import TpuNodeRestartConfig
from sentinel.respond.remediate.base import ActionContext, Check, Outcome
from sentinel.respond.remediate.guards import Reason


def _client(tpu: Any) -> Any:
    # google.* is imported on use: every daemon loads this action, few restart a node.
    from google.auth.credentials import AnonymousCredentials

    creds = AnonymousCredentials() if tpu.credentials == "anonymous" else None
    return make_tpu_client(api_endpoint=tpu.api_endpoint, credentials=creds)


class TpuNodeRestart:
    """The tpu_node_restart action."""

    kind = "tpu_node_restart"

    def check(self, ctx: ActionContext) -> Check:
        """A node to restart and a policy that allows a cold restart; no API call."""
        tpu = ctx.target.tpu
        if tpu is None:
            return Check.refuse(Reason.PRECONDITION, f"target {ctx.target.name} has no tpu: config")
        if not ctx.allow_cold:
            return Check.refuse(Reason.COLD_CACHE, "a TPU node restart is cold and the policy "
                                "does not allow cold restarts")
        return Check(True, f"stop and start TPU node {tpu.node} (COLD: XLA graphs recompile)",
                     data={"node": tpu.node_name})

    def run(self, ctx: ActionContext) -> Outcome:
        """stop_node, wait; start_node, wait; both within the time budget."""
        check = self.check(ctx)
        if not check.ok:
            return Outcome(False, check.summary, check.data)
        p: TpuNodeRestartConfig = ctx.params
        name = check.data["node"]
        deadline = ctx.deadline()
        data = dict(check.data)
        from google.api_core import exceptions as gexc

        client = _client(ctx.target.tpu)
        try:
            for verb, call in (("stop", client.stop_node), ("start", client.start_node)):
                left = min(deadline - time.monotonic(), p.operation_timeout_ms / 1000)
                if left <= 0:
                    return Outcome(False, f"no time left before {verb}", data)
                started = time.monotonic()
                node = call(request={"name": name}, timeout=min(60.0, left)).result(timeout=left)
                data[f"{verb}_s"] = round(time.monotonic() - started, 3)
                data[f"state_after_{verb}"] = node.state.name
        except (gexc.GoogleAPICallError, gexc.RetryError, TimeoutError,
                gexc.GoogleAPIError) as exc:
            return Outcome(False, f"TPU API: {type(exc).__name__}: {exc}"[:300], data)
        finally:
            client.transport.close()
        return Outcome(True, f"TPU node {name.rsplit('/', 1)[-1]} stopped and started "
                       f"({data['state_after_start']})", data)
