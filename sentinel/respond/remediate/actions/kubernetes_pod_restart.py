"""kubernetes_pod_restart: delete one pod so its controller recreates it, then wait for it.

The pod is named by the alert's labels (`{namespace}`, `{pod}`, as
kubernetes_sd sets them), else by the target's own (an alert aggregated
`by (target)` lost them). Before anything, read-only:

- the pod exists and has a controller that recreates it (a ReplicaSet of a
  Deployment, or a StatefulSet, which is also what a LeaderWorkerSet runs);
  a bare pod deleted is gone for good, so it is refused;
- it is not the last ready pod of that controller: deleting it would take
  the whole service down (refused as `last_ready` unless `allow_last_ready`);
  a pod that is not ready itself may always go, it serves nothing;
- the XLA cache is on a volume that outlives the pod (see kubepods), else
  the restart is cold and refused unless the policy allows cold restarts.

`run` checks again, deletes with `preconditions.uid` (so a same-named
replacement a StatefulSet already made is never deleted by mistake), then
waits within the step's timeout for a replacement pod (a uid it had not
seen) to be Ready. Its URL goes to the engine as `verify_url`: the engine
then verifies as for every action, /health and a one-token completion.
"""

from __future__ import annotations

import time
from typing import Any

from sentinel.collect.kubeapi import KubeError, api_client, meta, pod_owner, pod_ready
from sentinel.config.kubernetes import KubernetesPodRestartConfig
from sentinel.respond.remediate.base import ActionContext, Check, Outcome, TemplateError, render
from sentinel.respond.remediate.guards import Reason
from sentinel.respond.remediate.kubepods import (
    cache_check,
    call,
    siblings,
    url_for,
    wait_for,
)


class KubernetesPodRestart:
    """The kubernetes_pod_restart action."""

    kind = "kubernetes_pod_restart"

    def check(self, ctx: ActionContext) -> Check:
        """Read the pod, its siblings and its cache volume; no side effect."""
        p: KubernetesPodRestartConfig = ctx.params
        try:
            labels = {**ctx.target.labels, **ctx.labels}
            namespace, name = render(p.namespace, labels), render(p.pod, labels)
            client = api_client(p.api)
        except (TemplateError, KubeError) as exc:
            return Check.refuse(Reason.PRECONDITION, str(exc))
        try:
            return self._check(ctx, client, namespace, name)
        except KubeError as exc:
            return Check.refuse(Reason.PRECONDITION, f"pod {namespace}/{name}: {exc}")
        finally:
            client.close()

    def _check(self, ctx: ActionContext, client: Any, namespace: str, name: str) -> Check:
        from kubernetes import client as k

        p: KubernetesPodRestartConfig = ctx.params
        pod = call(k.CoreV1Api(client).read_namespaced_pod, name, namespace)
        owner = pod_owner(pod)
        if owner is None:
            return Check.refuse(Reason.PRECONDITION, f"pod {namespace}/{name} has no controller: "
                                "deleted, nothing would recreate it")
        pods = siblings(client, namespace, owner)
        ready = [meta(s).get("name") for s in pods if pod_ready(s)]
        data: dict[str, Any] = {
            "namespace": namespace, "pod": name, "uid": meta(pod).get("uid"),
            "owner": f"{owner.kind}/{owner.name}", "pods": len(pods), "ready_pods": len(ready),
            "pod_ready": pod_ready(pod)}
        if pod_ready(pod) and len(ready) <= 1 and not p.allow_last_ready:
            return Check.refuse(Reason.LAST_READY, f"pod {namespace}/{name} is the last ready "
                                f"pod of {owner.kind} {owner.name}: deleting it would stop the "
                                "service (allow_last_ready: true to allow)", **data)
        what = (f"delete pod {namespace}/{name} of {owner.kind} {owner.name} "
                f"({len(ready)}/{len(pods)} ready)")
        cache = cache_check(pod.get("spec") or {}, p.container, what, ctx.target.accelerator)
        return Check(cache.ok, cache.summary, cache.reason, {**cache.data, **data})

    def run(self, ctx: ActionContext) -> Outcome:
        """Check again, delete (uid precondition), wait for a Ready replacement."""
        from kubernetes import client as k

        p: KubernetesPodRestartConfig = ctx.params
        deadline = ctx.deadline()
        check = self.check(ctx)
        if not check.ok:
            return Outcome(False, check.summary, check.data)
        data = dict(check.data)
        namespace, name = data["namespace"], data["pod"]
        try:
            client = api_client(p.api)
        except KubeError as exc:
            return Outcome(False, str(exc), data)
        try:
            core = k.CoreV1Api(client)
            pod = call(core.read_namespaced_pod, name, namespace)
            owner = pod_owner(pod)
            assert owner is not None  # the check just saw it
            before = {meta(s).get("uid") for s in siblings(client, namespace, owner)}
            grace = None if p.grace_period_ms is None else p.grace_period_ms // 1000
            call(core.delete_namespaced_pod, name, namespace, body={
                "preconditions": {"uid": data["uid"]},
                **({} if grace is None else {"gracePeriodSeconds": grace})})
            deleted_at = time.monotonic()

            def replacement() -> dict[str, Any] | None:
                return next((s for s in siblings(client, namespace, owner)
                             if meta(s).get("uid") not in before and pod_ready(s)), None)

            new = wait_for(replacement, deadline)
        except KubeError as exc:
            return Outcome(False, f"pod {namespace}/{name}: {exc}", data)
        finally:
            client.close()
        data["replacement_wait_s"] = round(time.monotonic() - deleted_at, 3)
        if new is None:
            return Outcome(False, f"deleted pod {namespace}/{name}; no replacement pod of "
                           f"{data['owner']} was ready within the {ctx.timeout_s:g}s timeout",
                           data)
        data.update(new_pod=meta(new).get("name"), new_uid=meta(new).get("uid"),
                    verify_url=url_for(ctx.target.url, new))
        return Outcome(True, f"deleted pod {namespace}/{name}; replacement "
                       f"{meta(new).get('name')} ready after {data['replacement_wait_s']}s",
                       data)
