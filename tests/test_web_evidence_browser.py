"""Evidence that stays, in a real browser (Debian's chromium, headless): an incident that
resolved an hour ago, after a restart that emptied the series store, still shows its plot
from the database, with a legend, the rule's threshold, the firing and resolved marks and
values on hover, and only its own target's series. Screenshots under .ci/artifacts/."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from browser import browser, present, screenshot, text_of  # noqa: F401 (fixture)
from fixtures_e2e import wait_for

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.sim.server import SimServer, start_sim

pytestmark = pytest.mark.integration

RULES = """\
groups:
  - name: serving
    interval: 500ms
    rules:
      - alert: VLLMKVCacheNearlyFull
        expr: max by (target) (vllm:kv_cache_usage_perc) > 0.85
        labels: {severity: warning}
        annotations: {summary: "KV cache nearly full on {{ $labels.target }}"}
"""


@pytest.fixture
def sims() -> Iterator[tuple[SimServer, SimServer]]:
    a, b = start_sim(auto_traffic=False), start_sim(auto_traffic=False)
    yield a, b
    a.stop()
    b.stop()


def _config(tmp: Path, a: SimServer, b: SimServer) -> Path:
    (tmp / "rules.yaml").write_text(RULES)
    cfg = tmp / "sentinel.yaml"
    cfg.write_text(
        f"database: sqlite:///{tmp / 's.db'}\nlisten: 127.0.0.1:0\nrule_files: [rules.yaml]\n"
        "evaluation_interval: 500ms\nprobe_interval: 0s\n"
        "evidence: {before: 30m, after: 2s, interval: 500ms}\ntargets:\n"
        + "".join(f"  - {{name: {n}, url: '{s.url}', scrape_interval: 500ms, "
                  "scrape_timeout: 500ms}\n" for n, s in (("tpu-a", a), ("tpu-b", b))))
    return cfg


def _incident(url: str, target: str) -> dict | None:
    found = httpx.get(f"{url}/api/v1/incidents", params={"target": target}).json()["incidents"]
    return found[0] if found else None


def _samples(url: str, target: str) -> float:
    query = f'count_over_time(vllm:kv_cache_usage_perc{{target="{target}"}}[1m])'
    result = httpx.get(f"{url}/api/v1/query", params={"query": query}).json()["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def _evidence(url: str, iid: int) -> dict:
    return httpx.get(f"{url}/api/v1/incidents/{iid}/evidence").json()


def test_an_incident_resolved_an_hour_ago_keeps_its_plot(
        tmp_path: Path, sims: tuple[SimServer, SimServer], browser) -> None:  # noqa: ANN001,F811
    from selenium.webdriver.common.by import By

    a, b = sims
    a.set_state(kv_cache_usage=0.5)
    b.set_state(kv_cache_usage=0.99)  # tpu-b is nearly full all along: its own incident
    cfg = _config(tmp_path, a, b)
    offset = [0.0]
    app = App(load_config(cfg), clock=lambda: time.time() + offset[0])
    app.start()
    try:
        host, port = app.status.address  # type: ignore[union-attr]
        url = f"http://{host}:{port}"
        wait_for(lambda: _incident(url, "tpu-b"), 20, "tpu-b's incident")
        wait_for(lambda: _samples(url, "tpu-a") >= 10, 20, "a few seconds of tpu-a below 0.85")
        a.set_state(kv_cache_usage=0.97)
        inc = wait_for(lambda: _incident(url, "tpu-a"), 20, "tpu-a's incident to open")
        iid = inc["id"]  # type: ignore[index]
        wait_for(lambda: (_evidence(url, iid)["stored"] or {}).get("points"), 20,
                 "the series to be stored at opening")
        # While it fires: the stored series, and the newest seconds from the series store.
        browser.get(f"{url}/incidents/{iid}")
        source = text_of(browser, By.ID, "plot-source")
        assert "Stored with the incident" in source and "latest from the series store" in source
        assert browser.find_elements(By.CSS_SELECTOR, "#plot figure.rule svg polyline")
        screenshot(browser, "incident-firing-stored")
        a.set_state(kv_cache_usage=0.4)
        wait_for(lambda: _incident(url, "tpu-a")["status"] == "resolved", 20,  # type: ignore[index]
                 "tpu-a's incident to resolve")
        wait_for(lambda: (_evidence(url, iid)["stored"] or {}).get("final"), 20,
                 "the stored window to reach past the resolution")
        while_fired = _evidence(url, iid)
    finally:
        app.stop(2)
    # An hour later, a new daemon: its series store is empty, the window long gone from it.
    offset[0] = 3600.0
    app = App(load_config(cfg), clock=lambda: time.time() + offset[0])
    app.start()
    try:
        host, port = app.status.address  # type: ignore[union-attr]
        url = f"http://{host}:{port}"
        later = _evidence(url, iid)
        assert later["source"] == "stored"
        assert later["plots"] == while_fired["plots"]  # the same plot as while it fired
        rule = later["plots"][0]
        assert rule["threshold"]["text"] == "> 0.85"
        assert [s["labels"] for s in rule["series"]] == [{"target": "tpu-a"}]
        points = rule["series"][0]["points"]
        assert max(v for _, v in points) == 0.97
        # From before the onset (as far back as the store reached) to past the resolution.
        opened = later["marks"][0]["at_ms"]
        before = [v for t, v in points if t < opened - 1000]
        assert len(before) >= 2 and set(before) == {0.5}, points
        assert later["stored"]["final"] and later["stored"]["end"] == later["window"]["end"]

        browser.get(f"{url}/incidents/{iid}")
        wait_for(lambda: present(browser, By.ID, "plot"), 30, "the incident page")
        figure = browser.find_element(By.CSS_SELECTOR, "#plot figure.rule")
        lines = figure.find_elements(By.CSS_SELECTOR, "svg polyline")
        assert lines and len(lines[0].get_attribute("points").split()) >= 3
        legend = figure.find_element(By.CSS_SELECTOR, "ul.legend").text
        assert '{target="tpu-a"}' in legend and "max 0.97" in legend, legend
        assert "threshold > 0.85" in legend
        assert figure.find_elements(By.CSS_SELECTOR, "svg line.threshold")
        marks = {m.get_attribute("class") for m in figure.find_elements(
            By.CSS_SELECTOR, "svg line.mark")}
        assert {"mark firing", "mark resolved"} <= marks, marks
        hover = [t.get_attribute("textContent") for t in figure.find_elements(
            By.CSS_SELECTOR, "svg circle.pt title")]
        assert any(h.startswith('{target="tpu-a"} = 0.97 at ') for h in hover), hover[:3]
        page = text_of(browser, By.ID, "plot")
        assert "tpu-b" not in page
        assert "Stored with the incident" in text_of(browser, By.ID, "plot-source")
        # The diagnosis evidence series, also stored: tpu-a's only.
        assert browser.find_elements(By.CSS_SELECTOR, "#plot figure.evidence polyline")
        screenshot(browser, "incident-resolved-an-hour-ago")
        # tpu-b's incident shows tpu-b's series, never tpu-a's.
        other = _incident(url, "tpu-b")
        browser.get(f"{url}/incidents/{other['id']}")  # type: ignore[index]
        assert "tpu-a" not in text_of(browser, By.ID, "plot")
        assert 'target="tpu-b"' in text_of(browser, By.ID, "plot")
    finally:
        app.stop(2)
