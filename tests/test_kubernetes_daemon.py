"""The daemon with `kubernetes_sd`: scrape jobs follow the pods in the fake API (a scale-up
is scraped with the pod's labels, a scale-down stops scraping and its series go stale), and
remediation learns each discovered pod's address."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import browser  # noqa: F401 (fixture)
from fakes.kube_server import FakeKube, pod
from fixtures_e2e import wait_for

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.sim.server import SimServer, start_sim

pytestmark = pytest.mark.integration

NS = "inference"


@pytest.fixture
def sims() -> Iterator[dict[str, SimServer]]:
    first = start_sim(host="127.0.0.2")
    out = {"127.0.0.2": first, "127.0.0.3": start_sim(host="127.0.0.3", port=first.port)}
    try:
        yield out
    finally:
        for s in out.values():
            s.stop()


def up(app: App, target: str) -> float | None:
    assert app.engine is not None
    vec = app.engine.query(f'up{{target="{target}"}}', int(time.time() * 1000))
    return vec[0].value if vec else None


def test_scrape_jobs_follow_the_pods(tmp_path: Path, sims: dict[str, SimServer]) -> None:
    port = sims["127.0.0.2"].port
    api = FakeKube().start()
    labels = {"app": "vllm", "app.kubernetes.io/instance": "gemma4"}
    api.put("pods", pod("vllm-0", namespace=NS, ip="127.0.0.2", port=port, labels=labels))
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"""\
database: sqlite:///{tmp_path}/s.db
listen: 127.0.0.1:0
scrape_interval: 200ms
scrape_timeout: 200ms
keep_all_series: true   # no rule reads vllm:num_requests_running; this test does
targets:
  - name: static
    url: {sims["127.0.0.2"].url}
kubernetes_sd:
  - name: vllm
    api: {{api_server: "{api.url}"}}
    namespaces: [{NS}]
    label_selector: app=vllm
    port: http
remediation:
  policies:
    - name: p
      alerts: [VLLMTargetDown]
      steps: [{{kubernetes_pod_restart: {{api: {{api_server: "{api.url}"}}}}}}]
""")
    app = App(load_config(cfg))
    app.start()
    try:
        wait_for(lambda: up(app, "vllm-0") == 1.0, 60, "the discovered pod scraped")
        assert app.engine is not None
        series = app.engine.query('vllm:num_requests_running{target="vllm-0"}',
                                  int(time.time() * 1000))
        assert series and dict(series[0].labels)["app_kubernetes_io_instance"] == "gemma4"
        assert dict(series[0].labels)["namespace"] == NS

        api.put("pods", pod("vllm-1", namespace=NS, ip="127.0.0.3", port=port, labels=labels))
        wait_for(lambda: up(app, "vllm-1") == 1.0, 60, "the scaled-up pod scraped")
        assert app.pipeline is not None and app.pipeline.remediator is not None
        assert app.pipeline.remediator.engine.targets["vllm-1"].url == f"http://127.0.0.3:{port}"

        api.remove("pods", NS, "vllm-0")
        wait_for(lambda: up(app, "vllm-0") is None, 60, "the removed pod's series to go stale")
        assert app.scrape_jobs is not None  # scrape jobs run on the I/O loop
        jobs = app.scrape_jobs
        assert jobs.get("scrape:vllm-0") is None
        assert jobs.get("scrape:vllm-1") is not None
        assert jobs.get("scrape:static") is not None
        assert "vllm-0" not in app.pipeline.remediator.engine.targets
        # Still scraped (one 200 ms scrape may time out on a loaded machine: wait for an up).
        wait_for(lambda: up(app, "static") == 1.0, 60, "the static target still scraped")
    finally:
        app.stop()
        api.stop()


def probe_ok(app: App, target: str) -> float | None:
    assert app.engine is not None
    vec = app.engine.query(f'sentinel_probe_success{{target="{target}",probe="health"}}',
                           int(time.time() * 1000))
    return vec[0].value if vec else None


def test_discovered_pods_are_probed_and_a_removed_pod_stops_being_probed(
        tmp_path: Path, sims: dict[str, SimServer]) -> None:
    # A pod that answers /health may still serve nothing: discovered targets get the same
    # probes as static ones, at the global probe_interval.
    port = sims["127.0.0.2"].port
    api = FakeKube().start()
    api.put("pods", pod("vllm-0", namespace=NS, ip="127.0.0.2", port=port,
                        labels={"app": "vllm"}))
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"""\
database: sqlite:///{tmp_path}/s.db
listen: 127.0.0.1:0
scrape_interval: 200ms
scrape_timeout: 200ms
probe_interval: 300ms
kubernetes_sd:
  - name: vllm
    api: {{api_server: "{api.url}"}}
    namespaces: [{NS}]
    label_selector: app=vllm
    port: http
""")
    app = App(load_config(cfg))
    app.start()
    try:
        wait_for(lambda: probe_ok(app, "vllm-0") == 1.0, 60, "the discovered pod probed")
        sims["127.0.0.2"].set_state(healthy=False)
        wait_for(lambda: probe_ok(app, "vllm-0") == 0.0, 60, "its failing /health seen")
        api.remove("pods", NS, "vllm-0")
        wait_for(lambda: probe_ok(app, "vllm-0") is None, 60,
                 "the removed pod's probe series to go stale")
        assert app.scrape_jobs is not None
        assert app.scrape_jobs.get("probe:vllm-0") is None
    finally:
        app.stop()
        api.stop()


def _targets(url: str) -> dict[str, dict]:
    import httpx

    return {t["name"]: t for t in httpx.get(f"{url}/api/v1/targets").json()["targets"]}


def test_discovered_pods_are_on_the_targets_api_and_page(
        tmp_path: Path, sims: dict[str, SimServer], browser) -> None:  # noqa: ANN001,F811
    """/api/v1/targets and /targets list the pods discovery found beside the static targets,
    with scrape, probe and log-source health; a removed pod leaves the list."""
    from browser import screenshot
    from selenium.webdriver.common.by import By

    port = sims["127.0.0.2"].port
    api = FakeKube().start()
    api.put("pods", pod("vllm-0", namespace=NS, ip="127.0.0.2", port=port,
                        labels={"app": "vllm"}))
    log_file = tmp_path / "vllm.log"
    log_file.write_text("")
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"""\
database: sqlite:///{tmp_path}/s.db
listen: 127.0.0.1:0
scrape_interval: 200ms
scrape_timeout: 200ms
probe_interval: 300ms
targets:
  - name: static
    url: {sims["127.0.0.2"].url}
    logs: {{files: ['{log_file}'], poll_interval: 200ms}}
kubernetes_sd:
  - name: vllm
    api: {{api_server: "{api.url}"}}
    namespaces: [{NS}]
    label_selector: app=vllm
    port: http
""")
    app = App(load_config(cfg))
    app.start()
    try:
        host, http_port = app.status.address  # type: ignore[union-attr]
        url = f"http://{host}:{http_port}"

        def healthy() -> bool:
            t = _targets(url)
            return ("vllm-0" in t and t["vllm-0"]["up"] == 1.0
                    and t["vllm-0"]["probe_success"] == 1.0
                    and 1.0 in t["static"]["log_sources"].values())
        wait_for(healthy, 60, "the discovered pod scraped and probed, the log source polled")
        t = _targets(url)
        assert t["vllm-0"]["source"] == "kubernetes"
        assert t["vllm-0"]["address"].startswith("http://127.0.0.2:")
        assert t["static"]["source"] == "static" and t["vllm-0"]["log_sources"] == {}
        browser.get(f"{url}/targets")  # type: ignore[attr-defined]
        rows = {r.find_element(By.TAG_NAME, "td").text.split("\n")[0]: r.text
                for r in browser.find_elements(By.CSS_SELECTOR, "#targets tbody tr")}  # type: ignore[attr-defined]
        assert "kubernetes" in rows["vllm-0"] and "up" in rows["vllm-0"]
        assert "static" in rows["static"] and f"file:{log_file}" in rows["static"]
        screenshot(browser, "targets-kubernetes")
        api.remove("pods", NS, "vllm-0")
        wait_for(lambda: "vllm-0" not in _targets(url), 60, "the removed pod to leave")
    finally:
        app.stop()
        api.stop()
