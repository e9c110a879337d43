"""kubernetes_rollout_restart: `kubectl rollout restart` of a Deployment or StatefulSet.

As kubectl does, a strategic merge patch stamps the pod template with
`kubectl.kubernetes.io/restartedAt: <now, RFC 3339>`; the controller then
replaces every pod in its own order (maxUnavailable, partitions), so the
service stays up while the pods cycle. The workload is named by `name` (a
`{label}` template), or found from the alert's pod: pod → ReplicaSet →
Deployment, or pod → StatefulSet.

Read-only first: the workload exists, no rollout is already under way (the
controller has not caught up with the spec, or not every pod is updated:
a second restart would only pile up), and the pod template keeps the XLA
cache on a persistent volume (else cold, refused unless allowed). `run`
checks again, patches, then waits within the step's timeout until the
rollout is complete (`kubectl rollout status`'s test) and a pod carrying the
new stamp is Ready; its URL is the engine's `verify_url`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from sentinel.collect.kubeapi import KubeError, api_client, meta, pod_owner, pod_ready
from sentinel.config.kubernetes import KubernetesRolloutRestartConfig
from sentinel.respond.remediate.base import ActionContext, Check, Outcome, TemplateError, render
from sentinel.respond.remediate.guards import Reason
from sentinel.respond.remediate.kubepods import (
    cache_check,
    call,
    list_pods,
    read_workload,
    selector_string,
    url_for,
    wait_for,
)

RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
RESOURCES = {"Deployment": "deployments", "StatefulSet": "statefulsets"}


def rollout_done(obj: dict[str, Any]) -> tuple[bool, str]:
    """Whether the rollout is complete, and what it waits for (kubectl rollout status)."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    want = int(spec.get("replicas", 1))
    if int(status.get("observedGeneration", 0)) < int(meta(obj).get("generation", 0)):
        return False, "the controller has not seen the latest spec"
    updated = int(status.get("updatedReplicas", 0))
    if updated < want:
        return False, f"{updated}/{want} pods updated"
    if obj.get("kind") == "StatefulSet":
        ready = int(status.get("readyReplicas", 0))
        if ready < want or status.get("currentRevision") != status.get("updateRevision"):
            return False, f"{ready}/{want} pods ready on the new revision"
        return True, "complete"
    if int(status.get("replicas", 0)) > updated:
        return False, f"{int(status.get('replicas', 0)) - updated} old pods still running"
    available = int(status.get("availableReplicas", 0))
    if available < updated:
        return False, f"{available}/{updated} updated pods available"
    return True, "complete"


def labels_of(ctx: ActionContext) -> dict[str, str]:
    """The alert's labels over the target's (a `by (target)` alert lost namespace and pod)."""
    return {**ctx.target.labels, **ctx.labels}


class KubernetesRolloutRestart:
    """The kubernetes_rollout_restart action."""

    kind = "kubernetes_rollout_restart"

    def check(self, ctx: ActionContext) -> Check:
        """Find the workload, refuse a rollout under way or a cold cache; no side effect."""
        p: KubernetesRolloutRestartConfig = ctx.params
        try:
            namespace = render(p.namespace, labels_of(ctx))
            client = api_client(p.api)
        except (TemplateError, KubeError) as exc:
            return Check.refuse(Reason.PRECONDITION, str(exc))
        try:
            name = render(p.name, labels_of(ctx)) if p.name else self._from_pod(ctx, client,
                                                                            namespace)
            obj = read_workload(client, RESOURCES[p.kind], namespace, name)
        except (TemplateError, KubeError) as exc:
            return Check.refuse(Reason.PRECONDITION, f"{p.kind} in {namespace}: {exc}")
        finally:
            client.close()
        data = {"namespace": namespace, "workload": f"{p.kind}/{name}",
                "generation": meta(obj).get("generation")}
        done, why = rollout_done(obj)
        if not done:
            return Check.refuse(Reason.PRECONDITION, f"{p.kind} {namespace}/{name} is already "
                                f"rolling out ({why})", **data)
        template = (obj.get("spec") or {}).get("template") or {}
        check = cache_check(template.get("spec") or {}, p.container,
                            f"rollout restart {p.kind} {namespace}/{name}",
                            ctx.target.accelerator)
        return Check(check.ok, check.summary, check.reason, {**check.data, **data})

    def _from_pod(self, ctx: ActionContext, client: Any, namespace: str) -> str:
        """The workload that owns the alert's pod (pod → ReplicaSet → Deployment)."""
        from kubernetes import client as k

        p: KubernetesRolloutRestartConfig = ctx.params
        pod_name = render(p.pod, labels_of(ctx))
        owner = pod_owner(call(k.CoreV1Api(client).read_namespaced_pod, pod_name, namespace))
        if owner is not None and owner.kind == "ReplicaSet" and p.kind == "Deployment":
            owner = pod_owner(read_workload(client, "replicasets", namespace, owner.name))
        if owner is None or owner.kind != p.kind:
            raise KubeError(f"pod {pod_name} does not belong to a {p.kind}")
        return owner.name

    def run(self, ctx: ActionContext) -> Outcome:
        """Check again, stamp the pod template, wait for the rollout and a new ready pod."""
        from kubernetes import client as k

        p: KubernetesRolloutRestartConfig = ctx.params
        deadline = ctx.deadline()
        check = self.check(ctx)
        if not check.ok:
            return Outcome(False, check.summary, check.data)
        data = dict(check.data)
        namespace, name = data["namespace"], data["workload"].split("/", 1)[1]
        stamp = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}}
        try:
            client = api_client(p.api)
        except KubeError as exc:
            return Outcome(False, str(exc), data)
        try:
            apps = k.AppsV1Api(client)
            fn = apps.patch_namespaced_deployment if p.kind == "Deployment" \
                else apps.patch_namespaced_stateful_set
            patched = call(fn, name, namespace, patch,
                           _content_type="application/strategic-merge-patch+json")
            started = time.monotonic()
            data.update(restarted_at=stamp, generation=meta(patched).get("generation"))
            selector = selector_string((patched.get("spec") or {}).get("selector") or {})

            def finished() -> dict[str, Any] | None:
                done, why = rollout_done(read_workload(client, RESOURCES[p.kind], namespace,
                                                       name))
                data["rollout"] = why
                if not done:
                    return None
                return next((q for q in list_pods(client, namespace, selector) if pod_ready(q)
                             and (meta(q).get("annotations") or {}).get(RESTARTED_AT) == stamp),
                            None)

            new = wait_for(finished, deadline)
        except KubeError as exc:
            return Outcome(False, f"{p.kind} {namespace}/{name}: {exc}", data)
        finally:
            client.close()
        data["rollout_s"] = round(time.monotonic() - started, 3)
        if new is None:
            return Outcome(False, f"restarted {p.kind} {namespace}/{name}; rollout not complete "
                           f"within the {ctx.timeout_s:g}s timeout ({data.get('rollout')})", data)
        data.update(new_pod=meta(new).get("name"), verify_url=url_for(ctx.target.url, new))
        return Outcome(True, f"rollout restart of {p.kind} {namespace}/{name} complete after "
                       f"{data['rollout_s']}s", data)
