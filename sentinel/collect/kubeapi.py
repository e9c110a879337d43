"""What discovery and the pod actions share: an API client from the config, and pod facts.

The official `kubernetes` client (the `kubernetes` extra) is imported only
here and in the two actions, so a site without Kubernetes never loads it.
Pods are handled as the API's JSON (dicts), not as the client's models:
discovery keeps thousands of them, and the JSON is what tests and the
fake API speak.

Errors: `KubeError` carries the HTTP status (None for a connection failure)
and whether a retry may help (429, 5xx, connection: `sentinel.httpstatus`,
as for every outbound call); the API's error text is kept short and has no
credentials in it (they travel in headers, never in URLs).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from sentinel.config.kubernetes import KubernetesApiConfig
from sentinel.httpstatus import retryable as status_retryable

CACHE_ENV = "VLLM_XLA_CACHE_PATH"


class KubeError(Exception):
    """A Kubernetes API call failed; `status` is None when the API was not reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def retryable(self) -> bool:
        """429, 5xx and connection failures may pass; 4xx (RBAC, not found) will not."""
        return status_retryable(self.status)


def api_client(cfg: KubernetesApiConfig) -> Any:
    """A `kubernetes.client.ApiClient` for the config: api_server, kubeconfig, or in-cluster."""
    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise KubeError("the kubernetes client is not installed: pip install kubernetes "
                        "(from a clone: pip install '.[kubernetes]')") from exc
    if cfg.api_server is not None:
        conf = client.Configuration()
        conf.host = cfg.api_server.rstrip("/")
        return client.ApiClient(conf)
    try:
        if cfg.kubeconfig is None and cfg.context is None \
                and os.environ.get("KUBERNETES_SERVICE_HOST"):
            conf = client.Configuration()
            config.load_incluster_config(client_configuration=conf)
            return client.ApiClient(conf)
        path = os.path.expanduser(cfg.kubeconfig) if cfg.kubeconfig else None
        return config.new_client_from_config(config_file=path, context=cfg.context)
    except config.ConfigException as exc:
        raise KubeError(f"no Kubernetes credentials: {exc}"[:300]) from None


def as_kube_error(exc: BaseException) -> KubeError:
    """An exception from a client call as a KubeError with the API's own message."""
    if isinstance(exc, KubeError):
        return exc
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status > 0:
        message = ""
        try:
            message = str(json.loads(getattr(exc, "body", "") or "{}").get("message", ""))
        except (ValueError, AttributeError):
            message = str(getattr(exc, "reason", ""))
        return KubeError(f"Kubernetes API {status}: {message or getattr(exc, 'reason', '')}"
                         [:300], status)
    return KubeError(f"Kubernetes API unreachable: {type(exc).__name__}: {exc}"[:300])


def read_json(resp: Any) -> Any:
    """The JSON body of a `_preload_content=False` response."""
    try:
        return json.loads(resp.data)
    finally:
        resp.release_conn()


# -- pod facts ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Owner:
    """A pod's controller (ownerReference with controller: true)."""

    kind: str
    name: str
    uid: str


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    """`metadata` of an object, {} when absent."""
    return obj.get("metadata") or {}


def pod_ready(pod: dict[str, Any]) -> bool:
    """Whether the pod's Ready condition is True and it is not being deleted."""
    if meta(pod).get("deletionTimestamp"):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def pod_owner(pod: dict[str, Any]) -> Owner | None:
    """The pod's controller, or None for a bare pod (which nothing would recreate)."""
    for ref in meta(pod).get("ownerReferences") or []:
        if ref.get("controller"):
            return Owner(str(ref.get("kind", "")), str(ref.get("name", "")),
                         str(ref.get("uid", "")))
    return None


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The (non-init) containers of a pod spec."""
    return list(spec.get("containers") or [])


def container_port(pod: dict[str, Any], port: str | int) -> tuple[str, int] | None:
    """(container name, port number) for a port name or number; None when no container has it."""
    for c in containers(pod.get("spec") or {}):
        for p in c.get("ports") or []:
            if (isinstance(port, str) and p.get("name") == port) \
                    or (isinstance(port, int) and p.get("containerPort") == port):
                return str(c.get("name", "")), int(p["containerPort"])
    if isinstance(port, int):  # a number need not be declared, as with Prometheus
        first = containers(pod.get("spec") or {})
        return (str(first[0].get("name", "")) if first else "", port)
    return None
