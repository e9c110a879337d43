"""What the two Kubernetes actions share: reading pods and workloads, the warm-cache check.

Warm, on Kubernetes, is a property of the pod spec, not of a directory
Sentinel can look into: the container sets VLLM_XLA_CACHE_PATH, and that
path lies on a volume that outlives the pod (a PersistentVolumeClaim, or a
hostPath on the node). Anything else (no variable, the container's own
filesystem, an emptyDir, `medium: Memory`) is gone with the pod, so a pod
delete or a rollout recompiles: the engine judges that cost against the
policy (restart_cost.py). On a GPU the same holds for the torch.compile
cache (VLLM_CACHE_ROOT); the accelerator comes from the container's
resources (`google.com/tpu`, `nvidia.com/gpu`) or environment. A hostPath
is warm only while the new pod lands on the same node (a TPU VM runs one vLLM pod, so it does).
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
from sentinel.respond.remediate.restart_cost import (
    GPU,
    KEY_ACCELERATOR,
    KEY_WARM,
    KEY_WHY,
    TPU,
    UNKNOWN,
)
from sentinel.respond.remediate.warm import DEFAULT_VLLM_CACHE_ROOT, accelerator_of, facts

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


def pod_accelerator(c: dict[str, Any], env: dict[str, str], configured: str) -> tuple[str, str]:
    """The accelerator a pod's container asks for (resources), else its environment."""
    resources = c.get("resources") or {}
    asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    if configured not in (TPU, GPU) and any(k.endswith("/tpu") for k in asked):
        return TPU, "the container's resources"
    if configured not in (TPU, GPU) and any(k.endswith("/gpu") for k in asked):
        return GPU, "the container's resources"
    return accelerator_of(env, configured=configured)


def cache_check(spec: dict[str, Any], container: str | None, what: str,
                configured: str = "auto") -> Check:
    """What the new pod will find: warm when its cache (TPU: VLLM_XLA_CACHE_PATH; GPU:
    VLLM_CACHE_ROOT) lies on a persistent volume. Never a refusal: the engine judges."""
    cs = containers(spec)
    chosen = next((c for c in cs if c.get("name") == container), None) if container else \
        next((c for c in cs if any(e.get("name") == CACHE_ENV for e in c.get("env") or [])),
             cs[0] if cs else None)
    if chosen is None:
        return Check.refuse(Reason.PRECONDITION, f"no container {container!r} in the pod spec")
    env = {str(e.get("name")): str(e.get("value") or "") for e in chosen.get("env") or []}
    accel, told = pod_accelerator(chosen, env, configured)
    data: dict[str, Any] = {"container": chosen.get("name"), "accelerator_from": told}
    if accel == GPU:
        path, name = env.get("VLLM_CACHE_ROOT") or DEFAULT_VLLM_CACHE_ROOT, "torch.compile cache"
    elif accel == TPU or env.get(CACHE_ENV):
        accel, path, name = TPU, env.get(CACHE_ENV, ""), "XLA cache"
    else:
        data.update(facts(UNKNOWN, None, f"the accelerator is unknown: {told} tells"))
        return Check(True, f"{what} (warmth unknown: {data[KEY_WHY]})", data=data)
    if not path:
        data.update(facts(TPU, False, f"container {chosen.get('name')} does not set "
                          f"{CACHE_ENV} (or sets it from a reference Sentinel does not "
                          "resolve): every start compiles"))
        return _described(what, data)
    data["xla_cache_path" if accel == TPU else "compile_cache"] = path
    mounts = [m for m in chosen.get("volumeMounts") or []
              if path == m.get("mountPath") or path.startswith(
                  str(m.get("mountPath", "")).rstrip("/") + "/")]
    lost = None if accel == GPU else False  # a GPU's compile cache matters less than weights
    if not mounts:
        data.update(facts(accel, lost, f"{name} {path} is on the container's own filesystem, "
                          "lost with the pod"))
        return _described(what, data)
    mount = max(mounts, key=lambda m: len(str(m.get("mountPath"))))
    volume: dict[str, Any] = next(
        (v for v in spec.get("volumes") or [] if v.get("name") == mount.get("name")), {})
    kind = next((k for k in volume if k != "name"), "none")
    data.update(volume=mount.get("name"), volume_type=kind)
    if kind not in PERSISTENT:
        data.update(facts(accel, lost, f"{name} {path} is on volume {mount.get('name')} "
                          f"({kind}), which does not outlive the pod"))
        return _described(what, data)
    data.update(facts(accel, True, f"{name} {path} on {kind} volume {mount.get('name')}"))
    return _described(what, data)


def _described(what: str, data: dict[str, Any]) -> Check:
    state = {True: "warm", False: "COLD", None: "warmth unknown"}[data[KEY_WARM]]
    return Check(True, f"{what} ({data[KEY_ACCELERATOR]}, {state}: {data[KEY_WHY]})",
                 data=data)


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
