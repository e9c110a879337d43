"""kubernetes_pod_restart and kubernetes_rollout_restart through the official client against
the fake Kubernetes API (tests/fakes/kube_server.py), with simulated vLLM servers on loopback
addresses standing in for the pods' IPs, so the engine's verification reaches the new pod."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.kube_server import FakeKube, pod

from sentinel.config.kubernetes import KubernetesPodRestartConfig, KubernetesRolloutRestartConfig
from sentinel.config.remediation import RemediationConfig
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident
from sentinel.respond.remediate.actions import ACTIONS
from sentinel.respond.remediate.base import ActionContext, TargetInfo
from sentinel.respond.remediate.engine import Candidate, Engine, Prepared
from sentinel.respond.remediate.guards import Reason
from sentinel.sim.server import SimServer, start_sim

pytestmark = pytest.mark.integration

NS = "inference"
RS_UID = "rs-uid-1"
PVC = [{"name": "xla", "persistentVolumeClaim": {"claimName": "xla-cache"}}]
MOUNT = [{"name": "xla", "mountPath": "/xla"}]
ENV = {"VLLM_XLA_CACHE_PATH": "/xla/cache"}


def vllm_pod(name: str, ip: str, port: int, ready: bool = True, **kw: Any) -> dict[str, Any]:
    kw.setdefault("env", ENV)
    kw.setdefault("volumes", PVC)
    kw.setdefault("mounts", MOUNT)
    return pod(name, namespace=NS, ip=ip, port=port, ready=ready,
               labels={"app": "vllm", "pod-template-hash": "abc"},
               owner=("ReplicaSet", "vllm-abc", RS_UID), **kw)


class Cluster:
    """The fake API with a Deployment → ReplicaSet → pods, and a sim per pod IP."""

    def __init__(self) -> None:
        self.api = FakeKube().start()
        self.sims: dict[str, SimServer] = {}
        first = self.sim("127.0.0.2", 0)
        self.port = first.port
        self.api.put("deployments", {"metadata": {"name": "vllm", "namespace": NS,
                                                  "generation": 1, "uid": "dep-uid"},
                                     "spec": {"replicas": 2, "selector": {
                                         "matchLabels": {"app": "vllm"}},
                                         "template": {"spec": vllm_pod("x", "", 1)["spec"]}},
                                     "status": {"observedGeneration": 1, "replicas": 2,
                                                "updatedReplicas": 2, "availableReplicas": 2}})
        self.api.put("replicasets", {"metadata": {
            "name": "vllm-abc", "namespace": NS, "uid": RS_UID, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm",
                 "uid": "dep-uid", "controller": True}]},
            "spec": {"selector": {"matchLabels": {"app": "vllm", "pod-template-hash": "abc"}}}})
        self.timers: list[threading.Timer] = []

    def sim(self, ip: str, port: int) -> SimServer:
        self.sims[ip] = start_sim(host=ip, port=port)
        return self.sims[ip]

    def later(self, delay_s: float, fn: Any, *args: Any) -> None:
        t = threading.Timer(delay_s, fn, args)
        t.daemon = True
        self.timers.append(t)
        t.start()

    def recreate_as(self, name: str, ip: str, ready_after_s: float = 0.3) -> None:
        """Play the ReplicaSet controller: a replacement pod, Ready a little later."""
        def on_delete(deleted: dict[str, Any]) -> None:
            self.sim(ip, self.port)
            self.api.put("pods", vllm_pod(name, ip, self.port, ready=False))
            self.later(ready_after_s, self.set_ready, name)
        self.api.on_delete = on_delete

    def set_ready(self, name: str) -> None:
        def change(p: dict[str, Any]) -> None:
            p["status"]["conditions"][0]["status"] = "True"
        self.api.update("pods", NS, name, change)

    def close(self) -> None:
        for t in self.timers:
            t.cancel()
        for s in self.sims.values():
            s.stop()
        self.api.stop()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        yield c
    finally:
        c.close()


def ctx_for(c: Cluster, name: str, allow_cold: bool = False, timeout_s: float = 10.0,
            **params: Any) -> ActionContext:
    cfg = KubernetesPodRestartConfig.model_validate({"api": {"api_server": c.api.url}, **params})
    ip = c.api.get("pods", NS, name)["status"]["podIP"]
    return ActionContext(TargetInfo(name, f"http://{ip}:{c.port}"),
                         {"namespace": NS, "pod": name, "alertname": "VLLMTargetDown"},
                         cfg, timeout_s, allow_cold)


def open_incident(db: Database, target: str) -> int:
    with db.session() as s:
        inc = Incident(group_key=f"VLLMTargetDown/{target}", alertname="VLLMTargetDown",
                       target=target, status="open", severity="critical", summary="",
                       labels={}, opened_at=ms_to_dt(0), resolved_at=None,
                       updated_at=ms_to_dt(0))
        s.add(inc)
        s.flush()
        return inc.id


class Pages:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str, str]] = []

    def page(self, incident_id: int, title: str, reason: str, labels: Any) -> None:
        self.sent.append((incident_id, title, reason))


def test_pod_restart_deletes_exactly_that_pod_and_verifies_the_replacement(
        cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    c.api.put("pods", vllm_pod("vllm-abc-1", "127.0.0.2", c.port, ready=False))  # crashed
    c.sim("127.0.0.3", c.port)
    c.api.put("pods", vllm_pod("vllm-abc-2", "127.0.0.3", c.port))
    c.api.put("pods", pod("bystander", namespace=NS, labels={"app": "vllm"}, ip="127.0.0.9"))
    c.recreate_as("vllm-abc-3", "127.0.0.4")
    db = Database(f"sqlite:///{tmp_path}/s.db")
    db.upgrade()
    rem = RemediationConfig.model_validate({"policies": [{
        "name": "k8s", "alerts": ["VLLMTargetDown"], "steps": [{
            "kubernetes_pod_restart": {"api": {"api_server": c.api.url}},
            "timeout": "10s", "verify_deadline": "10s"}]}]})
    target = TargetInfo("vllm-abc-1", f"http://127.0.0.2:{c.port}")
    engine = Engine(rem, {"vllm-abc-1": target}, db, Pages())
    incident = open_incident(db, "vllm-abc-1")
    prepared = engine.prepare(Candidate(incident, "VLLMTargetDown", "vllm-abc-1",
                                        {"namespace": NS, "pod": "vllm-abc-1"},
                                        rem.policies[0], 0))
    assert isinstance(prepared, Prepared), prepared
    result = engine.execute(prepared)

    assert result.ok, result.detail
    # Exactly one DELETE, of that pod, with its uid as precondition; nothing else touched.
    uid = [d for d in c.api.deletes]
    assert [(ns, name) for ns, name, _ in uid] == [(NS, "vllm-abc-1")]
    assert [m for m, _, _ in c.api.requests if m not in ("GET",)] == ["DELETE"]
    assert c.api.get("pods", NS, "vllm-abc-2") is not None
    assert c.api.get("pods", NS, "bystander") is not None
    # Verification ran against the replacement's address, not the deleted pod's.
    assert c.sims["127.0.0.4"].chat_requests, "the new pod was never asked for a token"
    assert not c.sims["127.0.0.2"].chat_requests


def test_pod_restart_refuses_the_last_ready_pod(cluster: Cluster) -> None:
    c = cluster
    c.api.put("pods", vllm_pod("vllm-abc-1", "127.0.0.2", c.port))  # ready: the only one
    c.api.put("pods", vllm_pod("vllm-abc-2", "127.0.0.3", c.port, ready=False))
    action = ACTIONS["kubernetes_pod_restart"]
    check = action.check(ctx_for(c, "vllm-abc-1"))
    assert (check.ok, check.reason) == (False, Reason.LAST_READY)
    assert check.data["ready_pods"] == 1
    outcome = action.run(ctx_for(c, "vllm-abc-1"))
    assert not outcome.ok and "last ready" in outcome.detail
    assert c.api.deletes == []
    # Allowed explicitly, it goes.
    c.recreate_as("vllm-abc-3", "127.0.0.4")
    outcome = action.run(ctx_for(c, "vllm-abc-1", allow_last_ready=True))
    assert outcome.ok, outcome.detail
    assert [name for _, name, _ in c.api.deletes] == ["vllm-abc-1"]


def test_pod_restart_check_reports_a_cold_cache_for_the_engine_to_judge(cluster: Cluster
                                                                          ) -> None:
    c = cluster
    empty_dir = [{"name": "xla", "emptyDir": {"medium": "Memory"}}]
    c.api.put("pods", vllm_pod("vllm-abc-1", "127.0.0.2", c.port, volumes=empty_dir))
    c.api.put("pods", vllm_pod("vllm-abc-2", "127.0.0.3", c.port))
    action = ACTIONS["kubernetes_pod_restart"]
    check = action.check(ctx_for(c, "vllm-abc-1"))
    # The check describes; the engine refuses by the expected cost (restart_cost.py).
    assert check.ok and check.data["warm"] is False and check.data["accelerator"] == "tpu"
    assert check.data["volume_type"] == "emptyDir" and "COLD" in check.summary
    c.api.put("pods", vllm_pod("vllm-abc-2", "127.0.0.3", c.port, env={}))
    check = action.check(ctx_for(c, "vllm-abc-2"))
    assert check.data["warm"] is None and "unknown" in check.data["warm_why"]
    assert c.api.deletes == []


def test_pod_restart_refusals_bare_pod_missing_pod_and_a_bad_label(cluster: Cluster) -> None:
    c = cluster
    c.api.put("pods", pod("bare", namespace=NS, ip="127.0.0.5"))
    action = ACTIONS["kubernetes_pod_restart"]
    check = action.check(ctx_for(c, "bare"))
    assert check.reason is Reason.PRECONDITION and "no controller" in check.summary
    cfg = KubernetesPodRestartConfig.model_validate({"api": {"api_server": c.api.url}})
    missing = ActionContext(TargetInfo("x", "http://127.0.0.1:1"), {"namespace": NS,
                            "pod": "gone"}, cfg, 5.0)
    check = action.check(missing)
    assert check.reason is Reason.PRECONDITION and "404" in check.summary
    evil = ActionContext(TargetInfo("x", "http://127.0.0.1:1"), {"namespace": NS,
                         "pod": "../nodes/x"}, cfg, 5.0)
    assert action.check(evil).reason is Reason.PRECONDITION
    assert c.api.deletes == []


def test_pod_restart_fails_when_no_replacement_becomes_ready(cluster: Cluster) -> None:
    c = cluster
    c.api.put("pods", vllm_pod("vllm-abc-1", "127.0.0.2", c.port, ready=False))
    c.api.put("pods", vllm_pod("vllm-abc-2", "127.0.0.3", c.port))
    outcome = ACTIONS["kubernetes_pod_restart"].run(ctx_for(c, "vllm-abc-1", timeout_s=1.0))
    assert not outcome.ok and "no replacement" in outcome.detail
    assert [name for _, name, _ in c.api.deletes] == ["vllm-abc-1"]


def test_delete_with_a_stale_uid_is_refused_by_the_api(cluster: Cluster) -> None:
    """A StatefulSet reuses names: the uid precondition keeps the new pod safe."""
    from kubernetes import client as k

    from sentinel.collect.kubeapi import KubeError, api_client
    from sentinel.config.kubernetes import KubernetesApiConfig
    from sentinel.respond.remediate.kubepods import call

    c = cluster
    c.api.put("pods", vllm_pod("vllm-0", "127.0.0.2", c.port))
    client = api_client(KubernetesApiConfig.model_validate({"api_server": c.api.url}))
    try:
        with pytest.raises(KubeError) as err:
            call(k.CoreV1Api(client).delete_namespaced_pod, "vllm-0", NS,
                 body={"preconditions": {"uid": "an-older-pod"}})
    finally:
        client.close()
    assert err.value.status == 409 and not err.value.retryable
    assert c.api.get("pods", NS, "vllm-0") is not None


def test_rollout_restart_patches_the_template_as_kubectl_does(cluster: Cluster) -> None:
    c = cluster
    c.api.put("pods", vllm_pod("vllm-abc-1", "127.0.0.2", c.port, ready=False))

    def controller(resource: str, dep: dict[str, Any]) -> None:
        """The Deployment controller: one new pod from the stamped template, status caught up."""
        stamp = dep["spec"]["template"]["metadata"]["annotations"]
        new = vllm_pod("vllm-def-1", "127.0.0.5", c.port)
        new["metadata"]["annotations"] = stamp
        c.sim("127.0.0.5", c.port)

        def finish() -> None:
            c.api.put("pods", new)
            c.api.update("deployments", NS, "vllm", lambda d: d["status"].update(
                observedGeneration=d["metadata"]["generation"], replicas=2,
                updatedReplicas=2, availableReplicas=2))
        c.api.update("deployments", NS, "vllm", lambda d: d["status"].update(
            observedGeneration=d["metadata"]["generation"], updatedReplicas=0))
        c.later(0.3, finish)

    c.api.on_patch = controller
    cfg = KubernetesRolloutRestartConfig.model_validate({"api": {"api_server": c.api.url}})
    ctx = ActionContext(TargetInfo("vllm-abc-1", f"http://127.0.0.2:{c.port}"),
                        {"namespace": NS, "pod": "vllm-abc-1"}, cfg, 10.0)
    action = ACTIONS["kubernetes_rollout_restart"]
    check = action.check(ctx)
    assert check.ok, check.summary
    assert check.data["workload"] == "Deployment/vllm"  # found through pod → RS → Deployment
    outcome = action.run(ctx)
    assert outcome.ok, outcome.detail
    ((resource, ns, name, ctype, body),) = c.api.patches
    assert (resource, ns, name) == ("deployments", NS, "vllm")
    assert ctype.startswith("application/strategic-merge-patch+json")
    stamp = body["spec"]["template"]["metadata"]["annotations"][
        "kubectl.kubernetes.io/restartedAt"]
    assert stamp.endswith("Z") and stamp == outcome.data["restarted_at"]
    assert c.api.get("deployments", NS, "vllm")["metadata"]["generation"] == 2
    assert outcome.data["verify_url"] == f"http://127.0.0.5:{c.port}"
    assert c.api.deletes == []
    # A second restart while the rollout is under way is refused.
    c.api.update("deployments", NS, "vllm", lambda d: d["status"].update(updatedReplicas=1))
    again = action.check(ctx)
    assert again.reason is Reason.PRECONDITION and "already rolling out" in again.summary


def test_the_replacement_url_keeps_the_targets_port_and_scheme() -> None:
    from sentinel.respond.remediate.kubepods import url_for

    new = pod("vllm-2", ip="10.0.0.7", port=8123)
    assert url_for("http://10.0.0.1:8000", new) == "http://10.0.0.7:8000"
    assert url_for("https://[fd00::1]:9000", pod("v6", ip="fd00::2")) == "https://[fd00::2]:9000"
    # `sentinel remediate` for a discovered target knows no URL: the pod's declared port.
    assert url_for("", new) == "http://10.0.0.7:8123"


def test_an_alert_aggregated_by_target_finds_the_pod_through_the_targets_labels(
        cluster: Cluster) -> None:
    """`sum by (target) (...)` (the crash-signature rules) drops namespace and pod."""
    c = cluster
    c.api.put("pods", vllm_pod("vllm-abc-1", "127.0.0.2", c.port, ready=False))
    c.api.put("pods", vllm_pod("vllm-abc-2", "127.0.0.3", c.port))
    cfg = KubernetesPodRestartConfig.model_validate({"api": {"api_server": c.api.url}})
    target = TargetInfo("vllm-abc-1", f"http://127.0.0.2:{c.port}",
                        labels={"namespace": NS, "pod": "vllm-abc-1", "app": "vllm"})
    ctx = ActionContext(target, {"alertname": "VLLMHBMOutOfMemory", "target": "vllm-abc-1"},
                        cfg, 5.0)
    check = ACTIONS["kubernetes_pod_restart"].check(ctx)
    assert check.ok, check.summary
    assert (check.data["namespace"], check.data["pod"]) == (NS, "vllm-abc-1")
    # Without them on either, the action refuses instead of guessing.
    bare = ActionContext(TargetInfo("vllm-abc-1", target.url), dict(ctx.labels), cfg, 5.0)
    check = ACTIONS["kubernetes_pod_restart"].check(bare)
    assert check.reason is Reason.PRECONDITION and "namespace" in check.summary
