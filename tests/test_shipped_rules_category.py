"""The shipped crash rules carry the `category` label of the crash they select, so the
incidents' `category` filter (page and API) works out of the box."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from fixtures_e2e import log_sources_polled, wait_for
from fixtures_http import http
from test_e2e_logs import CRASH_LOG, ROOT, _config, _start

CATEGORY = re.compile(r'category=~?"([^"]+)"')


def _crash_rules() -> list[dict]:
    doc = yaml.safe_load((ROOT / "rules" / "vllm.yaml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]
            if "sentinel_log_signature_matches_total" in r.get("expr", "")]


def test_every_shipped_crash_rule_names_its_category() -> None:
    known = set(re.findall(r"category: (\w+)", (ROOT / "rules" / "signatures.yaml").read_text()))
    rules = _crash_rules()
    assert len(rules) >= 8
    for rule in rules:
        selected = CATEGORY.search(rule["expr"]).group(1).split("|")  # type: ignore[union-attr]
        category = rule["labels"].get("category")
        assert category in selected, rule["alert"]
        assert category in known, rule["alert"]


@pytest.mark.integration
def test_category_filter_finds_the_incident_of_a_shipped_rule(tmp_path: Path, sim, sink
                                                               ) -> None:  # noqa: ANN001
    log_file = tmp_path / "vllm.log"
    log_file.write_text("")
    cfg = _config(tmp_path, sim.url, sink.url,
                  f"      files: ['{log_file}']\n      poll_interval: 200ms\n")
    app = _start(cfg)
    try:
        host, port = app.status.address  # type: ignore[union-attr]
        url = f"http://{host}:{port}/api/v1/incidents"

        # The source joins the file at its end: write the crash once it has.
        wait_for(lambda: log_sources_polled(app), 60, "the log source to join the file")
        with log_file.open("a") as f:
            f.write("".join(f"{line}\n" for line in CRASH_LOG))
        (incident,) = wait_for(
            lambda: http.get(url, params={"category": "hbm_oom"}).json()["incidents"], 60,
            "an hbm_oom incident from the shipped rules")
        assert incident["alertname"] == "VLLMHBMOutOfMemory"
        assert incident["category"] == "hbm_oom"
        assert http.get(url, params={"category": "cuda_oom"}).json()["incidents"] == []
        page = http.get(f"http://{host}:{port}/", params={"category": "hbm_oom"}).text
        assert "VLLMHBMOutOfMemory" in page
    finally:
        app.stop(2)
