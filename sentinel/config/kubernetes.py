"""Kubernetes in the config: where the API is, which pods are targets, the two pod actions.

```yaml
kubernetes_sd:                      # beside `targets:`; targets found in the Kubernetes API
  - name: vllm                      # names this discovery (metrics, logs)
    namespaces: [inference]         # empty: every namespace (needs a ClusterRole)
    label_selector: app.kubernetes.io/name=vllm,leaderworkerset.sigs.k8s.io/worker-index=0
    port: http                      # the container port, by name (or a number)
    target_name: "{pod}"            # {namespace}, {pod}; must stay unique
    labels: {fleet: gemma4}         # added to every discovered target
    xla_cache_path: /dev/shm/xla_cache
    api: {kubeconfig: ~/.kube/config, context: prod}   # default: in-cluster, else ~/.kube/config

remediation:
  policies:
    - name: restart-crashed-pod
      alerts: [VLLMTargetDown]
      steps:
        - kubernetes_pod_restart: {namespace: "{namespace}", pod: "{pod}"}
        - kubernetes_rollout_restart: {kind: Deployment}     # the pod's Deployment
```

`api` is the same block everywhere: `api_server` (a plain URL such as
`kubectl proxy`'s, no credentials), or `kubeconfig` (+ `context`), or
neither: the service account when running in a pod, else `~/.kube/config`.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sentinel.config.base import Duration, PositiveDuration, Strict, http_url, problem

_NAME = r"^[a-zA-Z0-9_.-]+$"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_TEMPLATE_VARS = ("namespace", "pod")
_PLACEHOLDER = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)\}")
# One requirement of a label selector (equality- or set-based), as `kubectl -l` accepts it.
_KEY = r"(?:[a-zA-Z0-9.-]+/)?[a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?"
_VALUE = r"(?:[a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?)?"
_REQUIREMENT = re.compile(
    rf"^\s*(?:!\s*{_KEY}|{_KEY}\s*(?:(?:==?|!=)\s*{_VALUE}"
    rf"|\s+(?:in|notin)\s*\(\s*{_VALUE}(?:\s*,\s*{_VALUE})*\s*\))?)\s*$")
DEFAULT_WATCH_TIMEOUT_MS = 300_000
WORKLOAD_KINDS = ("Deployment", "StatefulSet")


def split_selector(selector: str) -> list[str]:
    """The requirements of a label selector: commas split them, except inside `in (a, b)`."""
    out, depth, cur = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur]


class KubernetesApiConfig(Strict):
    """Where the Kubernetes API is and how to log in (see the module docstring)."""

    api_server: str | None = None
    kubeconfig: str | None = None
    context: str | None = None

    @field_validator("api_server")
    @classmethod
    def _check_server(cls, v: str | None) -> str | None:
        return None if v is None else http_url(v, what="api_server")

    @field_validator("kubeconfig")
    @classmethod
    def _under_config_dir(cls, v: str | None, info: ValidationInfo) -> str | None:
        # Relative paths in a config mean the config file's folder, not the working one.
        if v is None:
            return None
        path = Path(v).expanduser()
        if not path.is_absolute():
            path = Path((info.context or {}).get("config_dir", ".")) / path
        return str(path)

    @model_validator(mode="after")
    def _one_way(self) -> KubernetesApiConfig:
        if self.api_server is not None and (self.kubeconfig or self.context):
            raise problem("api_server is a plain URL without credentials; it cannot be combined "
                          "with kubeconfig or context", "api_server")
        return self


def _check_template(v: str) -> str:
    names = _PLACEHOLDER.findall(v)
    bad = [n for n in names if n not in _TEMPLATE_VARS]
    if bad:
        raise problem(f"unknown placeholder {{{bad[0]}}} (use {{namespace}} and {{pod}})")
    if not names:
        raise problem("must contain {pod}, or every pod gets the same name")
    if not re.match(_NAME, _PLACEHOLDER.sub("x", v)):
        raise problem("besides placeholders, only letters, digits, '_', '.' and '-'")
    return v


class KubernetesSDConfig(Strict):
    """One discovery: pods matching a selector become targets, kept in sync by a watch."""

    name: str = Field(pattern=_NAME)
    api: KubernetesApiConfig = KubernetesApiConfig.model_validate({})
    namespaces: tuple[str, ...] = ()
    label_selector: str = Field(min_length=1)
    field_selector: str | None = None
    port: str | int
    scheme: str = "http"
    metrics_path: str = "/metrics"
    target_name: str = "{pod}"
    labels: dict[str, str] = Field(default_factory=dict)
    pod_labels: bool = True
    # Unset: the global scrape_interval and scrape_timeout.
    scrape_interval_ms: PositiveDuration | None = Field(None, alias="scrape_interval")
    scrape_timeout_ms: PositiveDuration | None = Field(None, alias="scrape_timeout")
    xla_cache_path: str | None = None
    # The server ends a watch after this long; Sentinel then watches again from where it was.
    watch_timeout_ms: PositiveDuration = Field(DEFAULT_WATCH_TIMEOUT_MS, alias="watch_timeout")
    backoff_initial_ms: PositiveDuration = Field(1_000, alias="backoff_initial")
    backoff_max_ms: PositiveDuration = Field(30_000, alias="backoff_max")

    @field_validator("namespaces")
    @classmethod
    def _check_namespaces(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for i, ns in enumerate(v):
            if not _DNS_LABEL.match(ns) or len(ns) > 63:
                raise problem("not a namespace name (lower-case letters, digits, '-')", i)
        return v

    @field_validator("label_selector")
    @classmethod
    def _check_selector(cls, v: str) -> str:
        for req in split_selector(v):
            if not _REQUIREMENT.match(req):
                raise problem(f"not a label selector requirement: {req.strip()!r} "
                              "(e.g. app=vllm, tier in (a,b), !canary)")
        return v

    @field_validator("port")
    @classmethod
    def _check_port(cls, v: str | int) -> str | int:
        if isinstance(v, int) and not 0 < v < 65536:
            raise problem("a port number is 1-65535")
        if isinstance(v, str) and (not _DNS_LABEL.match(v) or len(v) > 15):
            raise problem("a container port name (IANA_SVC_NAME: at most 15 characters, "
                          "lower-case letters, digits, '-')")
        return v

    @field_validator("scheme")
    @classmethod
    def _check_scheme(cls, v: str) -> str:
        if v not in ("http", "https"):
            raise problem("must be http or https")
        return v

    @field_validator("metrics_path")
    @classmethod
    def _check_path(cls, v: str) -> str:
        if not v.startswith("/"):
            raise problem("must start with /")
        return v

    @field_validator("target_name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        return _check_template(v)

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not _LABEL_NAME.match(name) or name.startswith("__"):
                raise problem("not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, no __ prefix)",
                              name)
        return v

    @model_validator(mode="after")
    def _ordered(self) -> KubernetesSDConfig:
        if self.backoff_max_ms < self.backoff_initial_ms:
            raise problem("backoff_max must not be below backoff_initial", "backoff_max")
        if (self.scrape_interval_ms and self.scrape_timeout_ms
                and self.scrape_timeout_ms > self.scrape_interval_ms):
            raise problem("scrape_timeout must not exceed scrape_interval", "scrape_timeout")
        return self


class KubernetesPodRestartConfig(Strict):
    """Delete one pod so its controller (Deployment, StatefulSet, LeaderWorkerSet) recreates it."""

    api: KubernetesApiConfig = KubernetesApiConfig.model_validate({})
    namespace: str = "{namespace}"
    pod: str = "{pod}"
    # Deleting the only ready pod of its workload takes the whole service down.
    allow_last_ready: bool = False
    grace_period_ms: Duration | None = Field(None, alias="grace_period")
    # The container whose VLLM_XLA_CACHE_PATH is checked; default: the one that sets it.
    container: str | None = None


class KubernetesRolloutRestartConfig(Strict):
    """`kubectl rollout restart`: stamp the pod template so every pod is replaced, in order."""

    api: KubernetesApiConfig = KubernetesApiConfig.model_validate({})
    namespace: str = "{namespace}"
    kind: str = "Deployment"
    # The workload's name (a `{label}` template); unset: found from the alert's pod.
    name: str | None = None
    pod: str = "{pod}"
    container: str | None = None

    @field_validator("kind")
    @classmethod
    def _check_kind(cls, v: str) -> str:
        if v not in WORKLOAD_KINDS:
            raise problem(f"must be one of {', '.join(WORKLOAD_KINDS)}")
        return v
