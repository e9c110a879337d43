"""kubernetes_sd: pods become targets and follow the fake API's watch (added, changed,
removed, 410 Gone → relist, API errors → backoff), through the official client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fakes.kube_server import FakeKube, pod
from prometheus_client import CollectorRegistry

from sentinel.collect.kubernetes_sd import (
    KubernetesDiscovery,
    SDMetrics,
    label_name,
    pod_target,
    safe_pod_target,
)
from sentinel.config.kubernetes import KubernetesSDConfig
from sentinel.config.model import TargetConfig

pytestmark = pytest.mark.integration

NS = "inference"


def sd_config(url: str = "http://127.0.0.1:1", **over: Any) -> KubernetesSDConfig:
    return KubernetesSDConfig.model_validate({
        "name": "vllm", "api": {"api_server": url}, "namespaces": [NS],
        "label_selector": "app=vllm", "port": "http", "watch_timeout": "30s",
        "backoff_initial": "50ms", "backoff_max": "200ms", **over})


def vllm(name: str, ip: str, **kw: Any) -> dict[str, Any]:
    labels = {"app": "vllm", "app.kubernetes.io/instance": "gemma4", **kw.pop("labels", {})}
    return pod(name, namespace=NS, ip=ip, labels=labels, **kw)


def wait_until(cond: Callable[[], object], what: str, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Recorder:
    """The add/remove hooks, recording calls and the resulting set of targets."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.now: dict[str, TargetConfig] = {}
        self.lock = threading.Lock()

    def add(self, t: TargetConfig) -> None:
        with self.lock:
            self.calls.append(("add", t.name))
            self.now[t.name] = t

    def remove(self, name: str) -> None:
        with self.lock:
            self.calls.append(("remove", name))
            self.now.pop(name, None)

    def names(self) -> list[str]:
        with self.lock:
            return sorted(self.now)


@pytest.fixture
def api() -> Iterator[FakeKube]:
    fake = FakeKube().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def run() -> Iterator[Callable[..., tuple[KubernetesDiscovery, Recorder]]]:
    started: list[KubernetesDiscovery] = []

    def start(sd: KubernetesSDConfig, registry: CollectorRegistry | None = None
              ) -> tuple[KubernetesDiscovery, Recorder]:
        rec = Recorder()
        d = KubernetesDiscovery(sd, rec.add, rec.remove, interval_ms=5000, timeout_ms=4000,
                                metrics=SDMetrics(registry or CollectorRegistry())).start()
        started.append(d)
        return d, rec

    yield start
    for d in started:
        d.stop()


# -- one pod → one target -------------------------------------------------------------------


def test_pod_target_labels_url_and_the_pods_that_make_none() -> None:
    sd = sd_config(labels={"fleet": "gemma4"}, scrape_interval="10s")
    p = vllm("vllm-0", "10.1.2.3", port=8000, labels={"1bad/key": "x", "tier": "a"})
    t = pod_target(p, sd, 5000, 4000)
    assert t is not None
    assert (t.name, t.url, t.scrape_interval_ms, t.scrape_timeout_ms) == (
        "vllm-0", "http://10.1.2.3:8000", 10_000, 4000)
    assert t.labels == {"app": "vllm", "app_kubernetes_io_instance": "gemma4", "_1bad_key": "x",
                        "tier": "a", "fleet": "gemma4", "namespace": NS, "pod": "vllm-0",
                        "container": "vllm", "node": "node-1"}
    assert pod_target(vllm("p", None), sd, 5000, 4000) is None  # pending: no IP yet
    assert pod_target(vllm("p", "10.0.0.1", phase="Failed"), sd, 5000, 4000) is None
    assert pod_target(vllm("p", "10.0.0.1", port_name="grpc"), sd, 5000, 4000) is None
    going = vllm("p", "10.0.0.1")
    going["metadata"]["deletionTimestamp"] = "2026-11-22T00:00:00Z"
    assert pod_target(going, sd, 5000, 4000) is None  # a deletion is intended, not an outage
    not_ready = vllm("p", "fd00::1", ready=False)
    t6 = pod_target(not_ready, sd_config(port=9000, target_name="{namespace}.{pod}"), 5000, 4000)
    assert t6 is not None and (t6.name, t6.url) == (f"{NS}.p", "http://[fd00::1]:9000")
    assert label_name("__meta") is None and label_name("a.b/c-d") == "a_b_c_d"


# -- the watch ------------------------------------------------------------------------------


def test_discovery_follows_pods_added_changed_and_removed_through_the_watch(api, run) -> None:
    api.put("pods", vllm("vllm-0", "10.0.0.1"))
    api.put("pods", vllm("other", "10.0.0.9", labels={"app": "router"}))
    api.put("pods", pod("elsewhere", namespace="other", labels={"app": "vllm"}))
    d, rec = run(sd_config(api.url))
    # The watch opens a moment after the list: reading the count at once raced it.
    wait_until(lambda: d.synced and api.open_watches == 1, "the first list and its watch")
    assert rec.names() == ["vllm-0"]

    api.put("pods", vllm("vllm-1", "10.0.0.2", ready=False))  # scaled up: starting
    wait_until(lambda: rec.names() == ["vllm-0", "vllm-1"], "the new pod")
    api.update("pods", NS, "vllm-1", lambda p: p["status"].update(podIP="10.0.0.3"))
    wait_until(lambda: rec.now["vllm-1"].url == "http://10.0.0.3:8000", "the new address")
    api.remove("pods", NS, "vllm-0")  # scaled down
    wait_until(lambda: rec.names() == ["vllm-1"], "the removed pod")
    # Relabelled out of the selector: the API sends DELETED to this watch.
    api.update("pods", NS, "vllm-1", lambda p: p["metadata"]["labels"].update(app="drained"))
    wait_until(lambda: rec.names() == [], "the relabelled pod")
    # All of it came through the one watch, with no second list.
    lists = [p for m, p, _ in api.requests if "watch=" not in p]
    watches = [p for m, p, _ in api.requests if "watch=" in p]
    assert len(lists) == 1 and len(watches) == 1, api.requests
    assert rec.calls == [("add", "vllm-0"), ("add", "vllm-1"), ("add", "vllm-1"),
                         ("remove", "vllm-0"), ("remove", "vllm-1")]
    assert d.last_error is None
    assert [t.name for t in d.targets()] == []


def test_410_gone_relists_and_finds_what_the_watch_missed(api, run) -> None:
    api.put("pods", vllm("vllm-0", "10.0.0.1"))
    api.put("pods", vllm("vllm-1", "10.0.0.2"))
    registry = CollectorRegistry()
    d, rec = run(sd_config(api.url), registry)
    wait_until(lambda: d.synced and api.open_watches == 1, "the watch")
    # The connection drops and the next attempt fails, so Sentinel is away while the
    # cluster changes and the API forgets that history: its old version is now too old.
    api.fail_next(1, 503)
    api.drop_watches()
    api.remove("pods", NS, "vllm-0")
    api.put("pods", vllm("vllm-2", "10.0.0.3"))
    api.compact()
    wait_until(lambda: rec.names() == ["vllm-1", "vllm-2"], "the relist")
    statuses = [s for _, p, s in api.requests if "watch=" in p]
    lists = [p for _, p, _ in api.requests if "watch=" not in p]
    assert len(lists) == 2, api.requests  # the first list, and one after the 410
    assert 503 in statuses
    assert ("remove", "vllm-0") in rec.calls
    assert registry.get_sample_value("sentinel_kubernetes_sd_relists_total", {"sd": "vllm"}) == 2
    # Two errors: the cut connection, then the 503; the 410 itself is no error.
    assert registry.get_sample_value("sentinel_kubernetes_sd_errors_total", {"sd": "vllm"}) == 2
    assert registry.get_sample_value("sentinel_kubernetes_sd_targets", {"sd": "vllm"}) == 2


def test_api_errors_back_off_keep_the_targets_and_recover(api, run) -> None:
    api.fail_next(3, 500)
    d, rec = run(sd_config(api.url))
    wait_until(lambda: d.last_error is not None, "the first error")
    assert "500" in d.last_error and not d.synced
    api.put("pods", vllm("vllm-0", "10.0.0.1"))
    wait_until(lambda: d.synced and rec.names() == ["vllm-0"], "recovery")
    assert d.last_error is None
    failed = [r for r in api.requests if r[2] == 500]
    assert len(failed) == 3
    # While the API is unreachable, what was discovered stays.
    api.fail_next(1000, 503)
    api.drop_watches()
    wait_until(lambda: d.last_error is not None, "the outage noticed")
    assert rec.names() == ["vllm-0"]
    api.clear_failures()
    api.put("pods", vllm("vllm-1", "10.0.0.2"))
    wait_until(lambda: rec.names() == ["vllm-0", "vllm-1"], "recovery after the outage")


def test_paged_list_and_all_namespaces(api, run) -> None:
    import sentinel.collect.kubernetes_sd as sdmod

    for i in range(7):
        api.put("pods", pod(f"p{i}", namespace=f"ns{i % 2}", labels={"app": "vllm"},
                            ip=f"10.0.1.{i}"))
    old = sdmod.PAGE_SIZE
    sdmod.PAGE_SIZE = 3
    try:
        d, rec = run(sd_config(api.url, namespaces=[], target_name="{namespace}.{pod}"))
        wait_until(lambda: d.synced, "the list")
    finally:
        sdmod.PAGE_SIZE = old
    assert len(rec.names()) == 7 and "ns1.p1" in rec.names()
    assert sum("continue=" in p for _, p, _ in api.requests) == 2


def test_stop_is_prompt_with_a_watch_open(api, run) -> None:
    d, _ = run(sd_config(api.url, watch_timeout="10m"))
    wait_until(lambda: api.open_watches == 1, "the watch")
    # Generous, and still far short of the 10-minute watch a stop that waited would sit
    # through (how fast it stops is no test's business: a loaded machine varies).
    d.stop(timeout_s=60)
    assert not any(t.is_alive() for t in d._threads)


def test_stop_shuts_a_watch_whose_answer_came_after_the_stop_began(api, run) -> None:
    # The race a loaded machine hit: stop() came after the API server took the watch
    # request but before its headers reached the client, so there was no connection to
    # shut yet, and the thread then sat in the quiet 10-minute watch.
    gate = threading.Event()
    api.watch_headers_gate = gate
    d, _ = run(sd_config(api.url, watch_timeout="10m"))
    wait_until(lambda: api.open_watches == 1, "the watch request")
    stopper = threading.Thread(target=d.stop, kwargs={"timeout_s": 30})
    stopper.start()
    wait_until(lambda: d._stop.is_set(), "stop() under way")
    gate.set()  # the headers come now: the watch has a connection stop() must shut
    stopper.join(60)
    assert not any(t.is_alive() for t in d._threads), "the watch outlived stop()"


def test_bookmarks_move_the_version_on_so_a_quiet_watch_resumes_without_a_list(api, run) -> None:
    """Other pods churn (the version moves on) while ours stay put; the bookmarks carry the
    newer version, so after the history is compacted the watch resumes without a 410."""
    api.put("pods", vllm("vllm-0", "10.0.0.1"))
    api.bookmark_every_s = 0.1
    d, rec = run(sd_config(api.url))
    wait_until(lambda: d.synced and api.open_watches == 1, "the watch")
    for i in range(5):
        api.put("pods", pod(f"router-{i}", namespace=NS, labels={"app": "router"}))
    churned = api.rv
    # Our pods did not change: only a bookmark brings the resume version up to `churned`.
    wait_until(lambda: any(int(v or 0) >= churned for v in d._versions.values()),
               "a bookmark at the new version")
    api.compact()
    api.drop_watches()
    wait_until(lambda: sum(f"resourceVersion={churned}" in p for _, p, _ in api.requests),
               "a watch from the bookmarked version")
    api.put("pods", vllm("vllm-1", "10.0.0.2"))
    wait_until(lambda: rec.names() == ["vllm-0", "vllm-1"], "the new pod")
    lists = [p for _, p, _ in api.requests if "watch=" not in p]
    assert len(lists) == 1, "a 410 forced a list: the bookmarks did not move the version on"


MALFORMED = [
    lambda p: p["spec"]["containers"][0]["ports"][0].update(containerPort="eighty"),
    lambda p: p["metadata"].update(labels=["app", "vllm"]),
    lambda p: p["spec"].update(containers="vllm"),
    lambda p: p["status"].update(podIP=["10.0.0.5"]),
    lambda p: p["metadata"].update(name="bad name/with slash"),
]


@pytest.mark.parametrize("spoil", MALFORMED)
def test_a_malformed_pod_costs_only_its_own_target(spoil) -> None:
    sd = sd_config()
    bad = vllm("bad", "10.0.0.5")
    spoil(bad)
    target, why = safe_pod_target(bad, sd, 5000, 4000)
    assert target is None and why
    assert safe_pod_target("not a pod", sd, 5000, 4000) == (None, "not a pod object")


def test_one_malformed_pod_does_not_stop_discovery_of_the_namespace(api, run, caplog) -> None:
    bad = vllm("bad", "10.0.0.5")
    bad["spec"]["containers"][0]["ports"][0]["containerPort"] = "eighty"
    api.put("pods", bad)
    api.put("pods", vllm("vllm-0", "10.0.0.1"))
    d, rec = run(sd_config(api.url))
    wait_until(lambda: d.synced, "the first list")
    assert rec.names() == ["vllm-0"]
    api.put("pods", vllm("vllm-1", "10.0.0.2"))  # the watch goes on after the bad pod
    wait_until(lambda: rec.names() == ["vllm-0", "vllm-1"], "the next pod")
    assert "pod inference/bad skipped" in caplog.text
