"""deploy/kubernetes/: every manifest validates against the Kubernetes OpenAPI schemas
(kubernetes-validate ships them, so this needs no cluster; `kubectl --dry-run=client` does,
and kubeconform is in neither Debian nor PyPI), the ServiceMonitor against the fields of its
CRD, the shipped Sentinel config loads, the pieces point at each other, and the Role grants
exactly the calls discovery and the actions make against the fake API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from fakes.kube_server import FakeKube, pod
from fixtures_e2e import wait_for

from sentinel.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
DIR = ROOT / "deploy" / "kubernetes"
# The oldest Kubernetes still commonly run, and the newest the package knows.
VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]

# The ServiceMonitor fields used, with types and patterns from the monitoring.coreos.com/v1
# CRD of the Prometheus Operator; unknown fields are refused, as a strict check does.
_SELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
    "matchExpressions": {"type": "array"}}}
_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?"
             r"(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
SERVICE_MONITOR = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {"type": "object", "required": ["selector", "endpoints"],
                 "additionalProperties": False, "properties": {
                     "selector": _SELECTOR, "jobLabel": {"type": "string"},
                     "namespaceSelector": {"type": "object", "additionalProperties": False,
                                           "properties": {"any": {"type": "boolean"},
                                                          "matchNames": {"type": "array",
                                                                         "items": {
                                                                             "type": "string"}}}},
                     "endpoints": {"type": "array", "minItems": 1, "items": {
                         "type": "object", "additionalProperties": False, "properties": {
                             "port": {"type": "string"}, "path": {"type": "string"},
                             "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                             "interval": _DURATION, "scrapeTimeout": _DURATION,
                             "honorLabels": {"type": "boolean"}}}}}}}}


def manifests() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        out += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return out


def by_kind(kind: str) -> dict[str, Any]:
    (doc,) = [d for _, d in manifests() if d["kind"] == kind]
    return doc


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_validates_against_the_kubernetes_schemas(version: str) -> None:
    kinds = []
    for name, doc in manifests():
        if doc["kind"] == "ServiceMonitor":
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {doc['kind']}: {exc.message} at {list(exc.path)}")
        kinds.append(doc["kind"])
    assert sorted(kinds) == sorted(["Namespace", "ServiceAccount", "Role", "RoleBinding",
                                    "Secret", "ConfigMap", "Deployment", "Service",
                                    "PodDisruptionBudget"])


def test_the_servicemonitor_validates_against_its_crd_fields() -> None:
    jsonschema.validate(by_kind("ServiceMonitor"), SERVICE_MONITOR)


def test_the_validation_catches_broken_manifests() -> None:
    """The checks above can fail: a typo'd field, a wrong type, a bad duration."""
    dep = by_kind("Deployment")
    broken = {**dep, "spec": {**dep["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[0], strict=True)
    broken = {**dep, "spec": {**dep["spec"], "replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[0], strict=True)
    sm = by_kind("ServiceMonitor")
    bad = {**sm, "spec": {**sm["spec"], "endpoints": [{"port": "http", "interval": "30 s"}]}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SERVICE_MONITOR)


def test_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((DIR / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in DIR.glob("*.yaml")
                                    if p.name != "kustomization.yaml")


def test_the_shipped_sentinel_config_loads(tmp_path: Path) -> None:
    text = by_kind("ConfigMap")["data"]["sentinel.yaml"]
    assert "/etc/sentinel/rules/vllm.yaml" in text  # where the Dockerfile puts the rules
    path = tmp_path / "sentinel.yaml"
    path.write_text(text.replace("/etc/sentinel/rules/vllm.yaml", str(ROOT / "rules/vllm.yaml")))
    secret = by_kind("Secret")["stringData"]
    url = secret["url"]
    shipped = {"SENTINEL_DATABASE_URL": url, "SENTINEL_READ_TOKEN": secret["read-token"],
               "SENTINEL_WRITE_TOKEN": secret["write-token"]}
    # The Secret's placeholders are public: Sentinel refuses to start with them (issue 36).
    with pytest.raises(ConfigError, match=r"api.tokens\[0\].token: is the shipped placeholder"):
        load_config(path, environ=shipped)
    config = load_config(path, environ={**shipped, "SENTINEL_READ_TOKEN": "r" * 32,
                                        "SENTINEL_WRITE_TOKEN": "w" * 32})
    assert config.database == url and config.listen.endswith(":9465")
    # Off loopback without tokens the daemon refuses to start: the manifests carry them.
    from sentinel.api.auth import check_bind

    check_bind(config.listen.rpartition(":")[0], config.api.tokens)
    assert {t.role for t in config.api.tokens} == {"read", "write"}
    assert config.kubernetes_sd[0].namespaces == (by_kind("Role")["metadata"]["namespace"],)
    assert config.remediation.policies[0].steps[0].kind == "kubernetes_pod_restart"


def test_the_pieces_point_at_each_other() -> None:
    dep, svc, pdb = by_kind("Deployment"), by_kind("Service"), by_kind("PodDisruptionBudget")
    sm, sa, binding = by_kind("ServiceMonitor"), by_kind("ServiceAccount"), by_kind("RoleBinding")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["replicas"] == 2 and pdb["spec"]["minAvailable"] == 1
    for selector in (dep["spec"]["selector"]["matchLabels"], svc["spec"]["selector"],
                     pdb["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= labels.items()
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 9465}
    assert svc["spec"]["ports"][0]["targetPort"] in ports
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    ref = container["env"][0]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"]) == (by_kind("Secret")["metadata"]["name"], "url")
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == by_kind("ConfigMap")["metadata"]["name"]
    assert container["args"][-1].startswith("/etc/sentinel/config/")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]


def _verbs(requests: list[tuple[str, str, int]]) -> set[tuple[str, str, str]]:
    """(api group, resource, verb) of each request, as the API server's authorizer sees it."""
    out = set()
    for method, path, _ in requests:
        route, _, query = path.partition("?")
        parts = route.strip("/").split("/")
        group = "" if parts[0] == "api" else parts[1]
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        if rest[:1] == ["namespaces"]:
            rest = rest[2:]
        resource, named = rest[0], len(rest) > 1
        verb = {"DELETE": "delete", "PATCH": "patch"}.get(method) or (
            "get" if named else "watch" if "watch=true" in query else "list")
        out.add((group, resource, verb))
    return out


def test_the_role_grants_exactly_what_discovery_and_the_actions_call() -> None:
    from sentinel.collect.kubernetes_sd import discover_once
    from sentinel.config.kubernetes import (
        KubernetesPodRestartConfig,
        KubernetesRolloutRestartConfig,
        KubernetesSDConfig,
    )
    from sentinel.respond.remediate.actions import ACTIONS
    from sentinel.respond.remediate.base import ActionContext, TargetInfo

    api = FakeKube().start()
    try:
        owner = ("ReplicaSet", "vllm-abc", "rs-1")
        for i in (1, 2):
            api.put("pods", pod(f"vllm-abc-{i}", namespace="inference", owner=owner,
                                labels={"app": "vllm"}, ip=f"127.0.0.{i + 1}"))
        api.put("replicasets", {"metadata": {"name": "vllm-abc", "namespace": "inference",
                                             "uid": "rs-1", "ownerReferences": [{
                                                 "kind": "Deployment", "name": "vllm",
                                                 "uid": "d-1", "controller": True,
                                                 "apiVersion": "apps/v1"}]},
                                "spec": {"selector": {"matchLabels": {"app": "vllm"}}}})
        api.put("deployments", {"metadata": {"name": "vllm", "namespace": "inference",
                                             "generation": 1},
                                "spec": {"replicas": 2, "selector": {"matchLabels": {
                                    "app": "vllm"}}, "template": {"spec": pod("t")["spec"]}},
                                "status": {"observedGeneration": 1, "replicas": 2,
                                           "updatedReplicas": 2, "availableReplicas": 2}})
        sd = KubernetesSDConfig.model_validate({
            "name": "v", "api": {"api_server": api.url}, "namespaces": ["inference"],
            "label_selector": "app=vllm", "port": "http"})
        assert len(discover_once(sd, 5000, 4000)) == 2
        from sentinel.collect.kubernetes_sd import KubernetesDiscovery  # one watch, too
        d = KubernetesDiscovery(sd, lambda t: None, lambda n: None, interval_ms=5000,
                                timeout_ms=4000).start()
        # Until the watch reached the API: the targets come from the list before it, and
        # a stop in between (a loaded machine) ends the discovery before it watches.
        wait_for(lambda: any("watch=true" in path for _, path, _ in list(api.requests)),
                 60, "the discovery's watch")
        d.stop()
        api_cfg = {"api": {"api_server": api.url}}
        labels = {"namespace": "inference", "pod": "vllm-abc-1"}
        target = TargetInfo("vllm-abc-1", "http://127.0.0.2:8000")
        for kind, cfg in (("kubernetes_rollout_restart", KubernetesRolloutRestartConfig),
                          ("kubernetes_pod_restart", KubernetesPodRestartConfig)):
            ctx = ActionContext(target, labels, cfg.model_validate(api_cfg), 0.5, True)
            ACTIONS[kind].run(ctx)
        used = _verbs(api.requests)
    finally:
        api.stop()
    granted = {(g, r, v) for rule in by_kind("Role")["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert used <= granted, f"the code calls what the Role does not grant: {used - granted}"
    # StatefulSet pods and rollouts make the same calls on statefulsets.
    statefulset = {("apps", "statefulsets", "get"), ("apps", "statefulsets", "patch")}
    assert granted - used == statefulset, f"granted but never used: {granted - used - statefulset}"
