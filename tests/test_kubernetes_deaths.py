"""A pod's container deaths from the (fake) Kubernetes API (issue 51): one event per death.

The discovery's watch sees each pod's status; a container whose
`lastState.terminated` moved on (the kubelet restarted it after it ended
non-zero) is reported once, as `kubectl describe` would say it, and the
classifier turns each such line into one event named by its reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakes.kube_server import FakeKube, pod
from prometheus_client import CollectorRegistry

from sentinel.collect.kubernetes_sd import KubernetesDiscovery, SDMetrics
from sentinel.config.kubernetes import KubernetesSDConfig
from sentinel.logs import Classifier, load_signature_file
from sentinel.model import LogEntry

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
NS = "inference"


def wait_until(cond: Callable[[], object], what: str, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def terminated(p: dict[str, Any], restarts: int, code: int, reason: str, finished: str,
               signal: int | None = None) -> None:
    """The kubelet's status after restarting the container that ended so."""
    term: dict[str, Any] = {"exitCode": code, "reason": reason,
                            "startedAt": "2026-12-07T10:00:00Z", "finishedAt": finished,
                            "containerID": f"containerd://{restarts:064x}"}
    if signal is not None:
        term["signal"] = signal
    p["status"]["containerStatuses"] = [{
        "name": "vllm", "image": "vllm/vllm-openai:v0.11.0", "ready": False,
        "imageID": "docker.io/vllm/vllm-openai@sha256:" + "ab" * 32,
        "restartCount": restarts, "started": False,
        "state": {"waiting": {"reason": "CrashLoopBackOff",
                              "message": "back-off 10s restarting failed container=vllm"}},
        "lastState": {"terminated": term}}]


def test_each_container_death_seen_by_the_watch_is_one_line_and_one_event() -> None:
    api = FakeKube().start()
    deaths: list[tuple[str, str]] = []
    lock = threading.Lock()

    def on_death(target: str, line: str) -> None:
        with lock:
            deaths.append((target, line))

    sd = KubernetesSDConfig.model_validate({
        "name": "vllm", "api": {"api_server": api.url}, "namespaces": [NS],
        "label_selector": "app=vllm", "port": "http", "watch_timeout": "30s",
        "backoff_initial": "50ms", "backoff_max": "200ms"})
    first = pod("vllm-0", namespace=NS, ip="10.0.0.1", labels={"app": "vllm"})
    terminated(first, 4, 1, "Error", "2026-12-07T09:00:00Z")  # before Sentinel looked
    api.put("pods", first)
    d = KubernetesDiscovery(sd, lambda t: None, lambda n: None, interval_ms=5000,
                            timeout_ms=4000, metrics=SDMetrics(CollectorRegistry()),
                            on_death=on_death).start()
    try:
        wait_until(lambda: d.synced and api.open_watches == 1, "the first list and its watch")
        api.update("pods", NS, "vllm-0",
                   lambda p: terminated(p, 5, 137, "OOMKilled", "2026-12-07T10:05:00Z"))
        wait_until(lambda: len(deaths) == 1, "the OOM kill")
        # Not a death: the restarted container becomes ready.
        api.update("pods", NS, "vllm-0", lambda p: p["status"]["conditions"][0].update(
            status="True"))
        api.update("pods", NS, "vllm-0",
                   lambda p: terminated(p, 6, 139, "Error", "2026-12-07T10:09:00Z", signal=11))
        wait_until(lambda: len(deaths) == 2, "the segfault")
        # A relist after 410 Gone sees the same status again: no new death.
        api.compact()
        api.drop_watches()
        api.update("pods", NS, "vllm-0", lambda p: p["metadata"]["labels"].update(x="y"))
        wait_until(lambda: api.open_watches == 1 and d.synced, "the watch again")
        api.update("pods", NS, "vllm-0",
                   lambda p: terminated(p, 7, 1, "Error", "2026-12-07T10:15:00Z"))
        wait_until(lambda: len(deaths) == 3, "the third death")
    finally:
        d.stop()
        api.stop()
    assert [t for t, _ in deaths] == ["vllm-0"] * 3
    assert "Reason: OOMKilled, Exit Code: 137" in deaths[0][1]
    assert "Exit Code: 139, Signal: 11" in deaths[1][1]
    # Each line is one event of its own, named by its reason (the watch's lines are minutes
    # apart on the pod's clock; as the daemon stamps them, they are read when they come).
    c = Classifier(load_signature_file(ROOT / "rules" / "signatures.yaml"))
    events = []
    for i, (_, line) in enumerate(deaths):
        events += c.feed(LogEntry("vllm-0", "kubernetes:vllm", 1_000 + i * 300_000, line))
        events += c.flush()
    assert [(e.signature, e.category) for e in events] == [
        ("container_oom_killed", "host_oom_killed"), ("unclassified_crash", "other"),
        ("unclassified_crash", "other")]


def test_a_death_after_watching_began_is_reported_at_first_sight_once() -> None:
    """Issue 53: the daemon began watching (and said ready) before discovery's first list;
    a container that died in between is reported, once, even when the pod leaves the
    targets (no IP) and comes back, or the list is made again."""
    api = FakeKube().start()
    deaths: list[str] = []
    lock = threading.Lock()

    def on_death(target: str, line: str) -> None:
        with lock:
            deaths.append(line)

    sd = KubernetesSDConfig.model_validate({
        "name": "vllm", "api": {"api_server": api.url}, "namespaces": [NS],
        "label_selector": "app=vllm", "port": "http", "watch_timeout": "30s",
        "backoff_initial": "50ms", "backoff_max": "200ms"})
    began_ms = 1_796_640_000_000  # 2026-12-07T10:40:00Z
    old = pod("vllm-0", namespace=NS, ip="10.0.0.1", labels={"app": "vllm"})
    terminated(old, 4, 1, "Error", "2026-12-07T09:00:00Z")  # before Sentinel began
    fresh = pod("vllm-1", namespace=NS, ip="10.0.0.2", labels={"app": "vllm"})
    terminated(fresh, 1, 137, "OOMKilled", "2026-12-07T10:40:05Z")  # after "ready"
    api.put("pods", old)
    api.put("pods", fresh)
    d = KubernetesDiscovery(sd, lambda t: None, lambda n: None, interval_ms=5000,
                            timeout_ms=4000, metrics=SDMetrics(CollectorRegistry()),
                            on_death=on_death, since_ms=began_ms).start()
    try:
        wait_until(lambda: d.synced and api.open_watches == 1, "the first list and its watch")
        wait_until(lambda: len(deaths) == 1, "the death since watching began")
        api.update("pods", NS, "vllm-1", lambda p: p["status"].pop("podIP"))
        api.update("pods", NS, "vllm-1", lambda p: p["status"].update(podIP="10.0.0.3"))
        api.compact()
        api.drop_watches()
        api.update("pods", NS, "vllm-1", lambda p: p["metadata"]["labels"].update(x="y"))
        wait_until(lambda: api.open_watches == 1 and d.synced, "the watch again")
        api.update("pods", NS, "vllm-0",
                   lambda p: terminated(p, 5, 139, "Error", "2026-12-07T10:41:00Z"))
        wait_until(lambda: len(deaths) == 2, "a later death of the other pod")
    finally:
        d.stop()
        api.stop()
    assert "pod inference/vllm-1" in deaths[0] and "OOMKilled" in deaths[0]
    assert "pod inference/vllm-0" in deaths[1] and "Exit Code: 139" in deaths[1]


def test_the_daemon_records_a_discovered_pods_death_as_its_targets_event(tmp_path: Path) -> None:
    from sqlalchemy import select

    from sentinel.config import load_config
    from sentinel.daemon.app import App
    from sentinel.incidents.db import Database
    from sentinel.incidents.models import LogEventRow
    from sentinel.sim.server import start_sim

    sim = start_sim(host="127.0.0.2")
    api = FakeKube().start()
    api.put("pods", pod("vllm-0", namespace=NS, ip="127.0.0.2", port=sim.port,
                        labels={"app": "vllm"}))
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"""\
database: sqlite:///{tmp_path}/s.db
listen: 127.0.0.1:0
scrape_interval: 500ms
kubernetes_sd:
  - name: vllm
    api: {{api_server: "{api.url}"}}
    namespaces: [{NS}]
    label_selector: app=vllm
    port: http
""")
    app = App(load_config(cfg))
    app.start()

    db = Database(f"sqlite:///{tmp_path}/s.db")

    def events() -> list[tuple[str, str, str]]:
        with db.session() as s:
            return [(r.target, r.signature, r.source) for r in s.scalars(
                select(LogEventRow).order_by(LogEventRow.id))]

    try:
        discovered = app.discovered
        assert discovered is not None
        wait_until(lambda: not discovered.not_synced(), "discovery to list the pods")
        api.update("pods", NS, "vllm-0",
                   lambda p: terminated(p, 1, 137, "OOMKilled", "2026-12-07T10:05:00Z"))
        wait_until(lambda: events(), "the pod's death on record")
        assert events() == [("vllm-0", "container_oom_killed", "kubernetes:pod-status")]
    finally:
        app.stop()
        db.dispose()
        api.stop()
        sim.stop()
