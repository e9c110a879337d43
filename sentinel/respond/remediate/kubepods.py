"""What the two Kubernetes actions share: reading pods and workloads, the warm-cache check.

Warm, on Kubernetes, is a property of the pod spec, not of a directory
Sentinel can look into: the container sets VLLM_XLA_CACHE_PATH, and that
path lies on a volume that outlives the pod (a PersistentVolumeClaim, or a
hostPath on the node). Anything else (no variable, the container's own
filesystem, an emptyDir, `medium: Memory`) is gone with the pod, so a pod
delete or a rollout recompiles for 20+ minutes: refused unless the policy
allows cold restarts. A hostPath is warm only while the new pod lands on
the same node (a TPU VM runs one vLLM pod, so it does).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sentinel.collect.kubeapi import (
    CACHE_ENV,
    KubeError,
    Owner,
    as_kube_error,
    containers,
    meta,
    read_json,
)
from sentinel.respond.remediate.base import Check
from sentinel.respond.remediate.guards import Reason

PERSISTENT = ("persistentVolumeClaim", "hostPath")
POLL_S = 0.2
# ownerReference kind → the apps/v1 resource that holds the pod selector.
OWNER_RESOURCES = {"ReplicaSet": "replicasets", "StatefulSet": "statefulsets"}


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """One client call returning the API's JSON; errors as KubeError."""
    try:
        return read_json(fn(*args, _preload_content=False, _request_timeout=(5.0, 15.0),
                            **kwargs))
    except Exception as exc:
        raise as_kube_error(exc) from None


def read_workload(client: Any, resource: str, namespace: str, name: str) -> dict[str, Any]:
    """GET an apps/v1 object (replicasets, statefulsets, deployments)."""
    from kubernetes import client as k

    apps = k.AppsV1Api(client)
    fn = {"replicasets": apps.read_namespaced_replica_set,
          "statefulsets": apps.read_namespaced_stateful_set,
          "deployments": apps.read_namespaced_deployment}[resource]
    return dict(call(fn, name, namespace))


def selector_string(selector: dict[str, Any]) -> str:
    """A LabelSelector object as the `labelSelector` query string."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for e in selector.get("matchExpressions") or []:
        op, key, values = e.get("operator"), e.get("key"), e.get("values") or []
        if op in ("In", "NotIn"):
            parts.append(f"{key} {op.lower()} ({','.join(values)})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def list_pods(client: Any, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The pods matching a selector in one namespace."""
    from kubernetes import client as k

    body = call(k.CoreV1Api(client).list_namespaced_pod, namespace, label_selector=selector)
    return list(body.get("items") or [])


def siblings(client: Any, namespace: str, owner: Owner) -> list[dict[str, Any]]:
    """Every pod the same controller owns (found by its selector, checked by owner uid)."""
    resource = OWNER_RESOURCES.get(owner.kind)
    if resource is None:
        raise KubeError(f"pods owned by a {owner.kind} are not restarted "
                        "(only Deployment, StatefulSet and LeaderWorkerSet pods)")
    workload = read_workload(client, resource, namespace, owner.name)
    selector = selector_string((workload.get("spec") or {}).get("selector") or {})
    return [p for p in list_pods(client, namespace, selector)
            if any(r.get("uid") == owner.uid for r in meta(p).get("ownerReferences") or [])]


def cache_check(spec: dict[str, Any], container: str | None, allow_cold: bool,
                what: str) -> Check:
    """Warm when the container's VLLM_XLA_CACHE_PATH lies on a persistent volume."""
    cs = containers(spec)
    chosen = next((c for c in cs if c.get("name") == container), None) if container else \
        next((c for c in cs if any(e.get("name") == CACHE_ENV for e in c.get("env") or [])),
             cs[0] if cs else None)
    if chosen is None:
        return Check.refuse(Reason.PRECONDITION, f"no container {container!r} in the pod spec")
    env = next((e for e in chosen.get("env") or [] if e.get("name") == CACHE_ENV), None)
    data: dict[str, Any] = {"container": chosen.get("name"), "warm": False}
    if env is None or not env.get("value"):
        cold = f"container {chosen.get('name')} does not set {CACHE_ENV} (or sets it from a " \
               "reference Sentinel does not resolve)"
        return _cold(allow_cold, what, cold, data)
    path = str(env["value"])
    data["xla_cache_path"] = path
    mounts = [m for m in chosen.get("volumeMounts") or []
              if path == m.get("mountPath") or path.startswith(
                  str(m.get("mountPath", "")).rstrip("/") + "/")]
    if not mounts:
        return _cold(allow_cold, what, f"{CACHE_ENV}={path} is on the container's own "
                     "filesystem, lost with the pod", data)
    mount = max(mounts, key=lambda m: len(str(m.get("mountPath"))))
    volume: dict[str, Any] = next(
        (v for v in spec.get("volumes") or [] if v.get("name") == mount.get("name")), {})
    kind = next((k for k in volume if k != "name"), "none")
    data.update(volume=mount.get("name"), volume_type=kind)
    if kind not in PERSISTENT:
        return _cold(allow_cold, what, f"{CACHE_ENV}={path} is on volume {mount.get('name')} "
                     f"({kind}), which does not outlive the pod", data)
    data["warm"] = True
    return Check(True, f"{what} (warm: {path} on {kind} volume {mount.get('name')})", data=data)


def _cold(allow_cold: bool, what: str, why: str, data: dict[str, Any]) -> Check:
    if allow_cold:
        return Check(True, f"{what} (COLD: {why}; recompiling takes 20+ minutes)", data=data)
    return Check.refuse(Reason.COLD_CACHE, f"{why}: the new pod would recompile for 20+ "
                        "minutes; the policy does not allow a cold restart", **data)


def url_for(target_url: str, pod: dict[str, Any]) -> str:
    """The target's URL with the host replaced by the pod's IP (same scheme, port, path).

    Without a target URL (`sentinel remediate` for a discovered target, which the
    config does not list): http on the pod's first declared container port.
    """
    ip = str((pod.get("status") or {}).get("podIP") or "")
    host = f"[{ip}]" if ":" in ip else ip
    parts = urlsplit(target_url)
    if not parts.scheme or not parts.hostname:
        ports = [p.get("containerPort") for c in containers(pod.get("spec") or {})
                 for p in c.get("ports") or []]
        return f"http://{host}:{ports[0]}" if ports else f"http://{host}"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def wait_for(probe: Callable[[], Any], until: float) -> Any:
    """Poll `probe` until it returns something truthy or `until` (monotonic) passes."""
    while True:
        found = probe()
        if found or time.monotonic() >= until:
            return found
        time.sleep(min(POLL_S, max(0.0, until - time.monotonic())))
