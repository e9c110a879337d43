"""The page in a real browser (Debian's chromium, headless): the list loads, an incident opens
with its timeline and plot, a parked action is approved from the page and runs; planted
markup in every shown field stays inert text. Screenshots under .ci/artifacts/."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_helpers import WRITE_TOKEN, start_rig, wait_log_source
from browser import (  # noqa: F401 (fixture)
    attr_of,
    browser,
    click,
    gone,
    present,
    screenshot,
    settled,
    text_of,
    type_into,
)
from fixtures_e2e import wait_for
from test_api_security import XSS, _config, plant

from sentinel.config import load_config
from sentinel.daemon.app import App

pytestmark = pytest.mark.integration


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:
        yield Path(d)


def _text(b, css: str) -> str:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    # Read again if the list's live update swaps the rows while they are being read.
    return settled(lambda: "\n".join(e.text for e in b.find_elements(By.CSS_SELECTOR, css)),
                   f"reading {css}")


def test_list_incident_plot_and_approve_from_the_page(tmp_path, sock_dir, sink,
                                                       browser) -> None:  # noqa: ANN001,F811
    from selenium.webdriver.common.by import By

    b = browser
    rig = start_rig(tmp_path, sock_dir, sink.url, approval="required")
    try:
        wait_log_source(rig)
        rig.crash()
        wait_for(lambda: httpx.get(f"{rig.url}/api/v1/approvals?status=pending")
                 .json()["approvals"], 15, "the action to be parked")
        b.get(f"{rig.url}/login")
        type_into(b, By.NAME, "token", WRITE_TOKEN)
        click(b, By.CSS_SELECTOR, "form button")
        wait_for(lambda: "Incidents" in b.title, 30, "the list after logging in")
        assert "VLLMHBMOutOfMemory" in _text(b, "tbody")
        assert "open" in _text(b, "td.status-open")
        screenshot(b, "incident-list")
        click(b, By.PARTIAL_LINK_TEXT, "VLLMHBMOutOfMemory")
        wait_for(lambda: present(b, By.ID, "timeline"), 30, "the incident page")
        timeline = _text(b, "#timeline")
        assert "firing" in timeline and "awaiting approval" in timeline
        points = settled(lambda: [p.get_attribute("points") for p in b.find_elements(
            By.CSS_SELECTOR, "#plot svg polyline")], "the plot")
        assert points, _text(b, "#plot")
        # The counter exists from the first matched line on: a few points so far.
        assert len(points[0].split()) >= 2
        assert "hbm_oom" in _text(b, "#excerpt") or _text(b, "#excerpt")
        screenshot(b, "incident-awaiting-approval")
        click(b, By.CSS_SELECTOR, "button.approve")

        def action_succeeded() -> bool:
            b.refresh()
            return "succeeded" in _text(b, "#actions .action-status")
        wait_for(action_succeeded, 25, "the approved action to run and verify")
        assert "approved by oncall-lead" in _text(b, "#timeline")
        assert "verified" in _text(b, "#timeline")
        assert any(w == "POST start" for _, w in rig.sim.container.events)
        marks = b.find_elements(By.CSS_SELECTOR, "#plot svg line.mark")
        assert len(marks) >= 2  # opened, and the restart (and resolved, once it is)
        screenshot(b, "incident-after-approval")
        b.get(f"{rig.url}/targets")
        assert "tpu-a" in _text(b, "table")
        screenshot(b, "targets")
        b.get(f"{rig.url}/stats")
        assert "VLLMHBMOutOfMemory" in _text(b, "table")
        assert b.find_elements(By.CSS_SELECTOR, "svg rect.bar")
        screenshot(b, "stats")
        # On a phone-sized screen the incident page still reads.
        b.set_window_size(390, 844)
        b.get(f"{rig.url}/")
        wait_for(lambda: present(b, By.CSS_SELECTOR, "tbody tr"), 30, "the list")
        scroll_w = b.execute_script("return document.documentElement.scrollWidth")
        assert scroll_w <= 400, scroll_w
        screenshot(b, "incident-list-phone")
    finally:
        rig.stop()


def test_planted_markup_is_inert_in_the_browser(tmp_path: Path, browser) -> None:  # noqa: ANN001,F811
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    b = browser
    app = App(load_config(_config(tmp_path)))
    app.start()
    try:
        host, port = app.status.address  # type: ignore[union-attr]
        iid, _ = plant(app.pipeline.tracker.db)  # type: ignore[union-attr]
        for path in ("/", f"/incidents/{iid}"):
            b.get(f"http://{host}:{port}{path}")
            # get() returns once the page has loaded: a planted inline script or onerror
            # handler would have run by then (no sleep needed to give it a chance).
            assert b.execute_script("return document.readyState") == "complete"
            assert b.title != "pwned"
            with pytest.raises(NoAlertPresentException):
                b.switch_to.alert.text  # noqa: B018
            assert not b.find_elements(By.CSS_SELECTOR, "main script, main img")
            assert '<script>document.title="pwned"</script>' in text_of(b, By.TAG_NAME, "main")
        shown = text_of(b, By.TAG_NAME, "main")
        for where in ("evil", "runbook", "line ", "description"):
            assert where in shown
        assert shown.count(XSS) >= 6
        screenshot(b, "escaped-markup")
        # The list updates itself: an incident opened after the page loaded shows up
        # without a reload (and its planted markup stays text there too).
        b.get(f"http://{host}:{port}/")
        before = b.execute_script("return performance.timeOrigin")
        link = b.find_element(By.CSS_SELECTOR, f"#incident-rows a[href='/incidents/{iid}']")
        newer, _ = plant(app.pipeline.tracker.db, "<b>late</b>")  # type: ignore[union-attr]
        wait_for(lambda: f"#{newer}" in text_of(b, By.ID, "incident-rows"), 30,
                 "the live update to show the new incident")
        assert b.execute_script("return performance.timeOrigin") == before  # no reload
        assert "<b>late</b>" in text_of(b, By.ID, "incident-rows")
        assert not b.find_elements(By.CSS_SELECTOR, "main script, main img")
        # The rows already shown were kept, not swapped: a link about to be clicked (or
        # holding keyboard focus) is the same node after the update.
        assert not gone(link)
        assert [a.get_attribute("href").rsplit("/", 1)[1] for a in b.find_elements(
            By.CSS_SELECTOR, "#incident-rows td:first-child a")][:2] == [str(newer), str(iid)]
    finally:
        app.stop(2)


FLAG = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'


def test_markup_is_text_on_every_page(tmp_path: Path, browser) -> None:  # noqa: ANN001,F811
    """Labels, annotations, log excerpt, runbook, notes and a silence's comment holding
    markup render as visible text on every page: no element made of it, no script run."""
    import yaml
    from selenium.webdriver.common.by import By

    b = browser
    cfg = _config(tmp_path)
    # A live alert whose rule's label and annotation hold the markup: /alerts and /rules.
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [
        {"alert": "Planted", "expr": "vector(1)", "for": "1h", "labels": {"evil": FLAG},
         "annotations": {"summary": FLAG}}]}]}))
    cfg.write_text(cfg.read_text() + "rule_files: [rules.yaml]\nevaluation_interval: 1s\n")
    app = App(load_config(cfg))
    app.start()
    try:
        host, port = app.status.address  # type: ignore[union-attr]
        url = f"http://{host}:{port}"
        iid, _ = plant(app.pipeline.tracker.db, FLAG)  # type: ignore[union-attr]
        wait_for(lambda: httpx.get(f"{url}/api/v1/alerts").json()["data"]["alerts"], 15,
                 "the planted rule's alert to go pending")
        r = httpx.post(f"{url}/api/v2/silences", headers={"Authorization": f"Bearer {WRITE_TOKEN}"},
                       json={"matchers": [{"name": "a", "value": FLAG, "isRegex": False}],
                             "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2036-01-01T00:00:00Z",
                             "createdBy": "x", "comment": FLAG})
        assert r.status_code == 200, r.text
        for path in ("/", f"/incidents/{iid}", "/stats", "/silences", "/targets", "/alerts",
                     "/rules"):
            b.get(url + path)
            assert b.execute_script("return window.__xss") is None, path
            assert not b.find_elements(By.CSS_SELECTOR, "main script, main img"), path
            if path != "/targets":  # no target carries the planted text
                assert "<script>window.__xss=1</script>" in text_of(b, By.TAG_NAME, "main"), \
                    path
            screenshot(b, "xss-" + (path.strip("/").replace("/", "-") or "list"))
    finally:
        app.stop(2)


def test_alerts_page_shows_a_pending_alerts_for_progress(
        tmp_path: Path, browser) -> None:  # noqa: ANN001,F811
    """A rule true from the start with `for: 1h` goes pending: the alerts page shows when it
    became active, its `for` and the share elapsed; the rules page its health and evaluation;
    the JSON API answers in Prometheus's shape, filtered by state and label."""
    from selenium.webdriver.common.by import By

    (tmp_path / "rules.yaml").write_text(
        "groups:\n- name: page\n  rules:\n  - alert: SlowBurn\n    expr: vector(1)\n"
        "    for: 90s\n    labels: {severity: warning, team: infra}\n"
        "    annotations: {summary: burning slowly}\n"
        "  - alert: Quiet\n    expr: vector(0) > 1\n")
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"database: sqlite:///{tmp_path / 's.db'}\nlisten: 127.0.0.1:0\n"
                   "rule_files: [rules.yaml]\nevaluation_interval: 1s\n")
    app = App(load_config(cfg))
    app.start()
    b = browser
    try:
        host, port = app.status.address  # type: ignore[union-attr]
        url = f"http://{host}:{port}"
        wait_for(lambda: httpx.get(f"{url}/api/v1/alerts").json()["data"]["alerts"], 15,
                 "the rule to go pending")
        # Some of `for` elapsed (3 s of 90 s), so the progress reads more than 0.
        wait_for(lambda: httpx.get(f"{url}/api/v1/alerts").json()["data"]["alerts"][0][
            "forElapsed"] >= 0.03, 15, "a few seconds of `for` to pass")
        (alert,) = httpx.get(f"{url}/api/v1/alerts").json()["data"]["alerts"]
        assert alert["state"] == "pending" and alert["labels"]["alertname"] == "SlowBurn"
        assert alert["forSeconds"] == 90 and 0.03 <= alert["forElapsed"] < 1
        assert alert["activeAt"] and alert["firesAt"] > alert["activeAt"]
        assert not httpx.get(f"{url}/api/v1/alerts?state=firing").json()["data"]["alerts"]
        assert not httpx.get(f"{url}/api/v1/alerts", params={"label": 'team="db"'}
                             ).json()["data"]["alerts"]
        assert httpx.get(f"{url}/api/v1/alerts?state=bogus").status_code == 400
        rules = httpx.get(f"{url}/api/v1/rules").json()["data"]["groups"][0]["rules"]
        slow, quiet = rules
        assert (slow["state"], slow["health"], slow["duration"]) == ("pending", "ok", 90)
        assert slow["lastEvaluation"] and quiet["state"] == "inactive"
        assert httpx.get(f"{url}/api/v1/rules").json()["data"]["groups"][0]["interval"] == 1
        only = httpx.get(f"{url}/api/v1/rules?state=inactive").json()["data"]["groups"]
        assert [r["name"] for g in only for r in g["rules"]] == ["Quiet"]

        b.get(f"{url}/alerts")
        row = b.find_element(By.CSS_SELECTOR, "#alerts tr.alert-pending")
        assert "SlowBurn" in row.text and "90.0s" in row.find_element(By.CLASS_NAME, "for").text
        assert row.find_element(By.CLASS_NAME, "active-since").text.strip()
        progress = row.find_element(By.CSS_SELECTOR, ".for-progress progress")
        assert progress.get_attribute("max") == "100"
        assert 3 <= int(progress.get_attribute("value")) < 100
        assert "%" in row.find_element(By.CLASS_NAME, "for-progress").text
        assert re.fullmatch(r"pending \d+\.\ds of 90\.0s",
                            row.find_element(By.CLASS_NAME, "for-text").text)
        screenshot(b, "alerts-pending")
        b.get(f"{url}/alerts?state=firing")
        assert "No pending or firing alerts match" in text_of(b, By.ID, "alerts")
        b.get(f"{url}/rules")
        text = text_of(b, By.TAG_NAME, "main")
        assert "SlowBurn" in text and "Quiet" in text and "pending" in text and "ok" in text
        screenshot(b, "rules")
        b.get(url + '/rules?label=team%3D%22infra%22')
        text = text_of(b, By.TAG_NAME, "main")
        assert "SlowBurn" in text and "Quiet" not in text
    finally:
        app.stop(2)


def test_silence_from_the_incident_page(tmp_path: Path, browser) -> None:  # noqa: ANN001,F811
    """The incident page offers a silence prefilled with the incident's alertname and target;
    submitting it creates the silence and comes back to the incident."""
    from selenium.webdriver.common.by import By

    b = browser
    app = App(load_config(_config(tmp_path)))
    app.start()
    try:
        host, port = app.status.address  # type: ignore[union-attr]
        url = f"http://{host}:{port}"
        iid, _ = plant(app.pipeline.tracker.db, "-x")  # type: ignore[union-attr]
        b.get(f"{url}/incidents/{iid}")
        assert not b.find_elements(By.ID, "silence-form")  # reading only: no form
        b.get(f"{url}/login")
        type_into(b, By.NAME, "token", WRITE_TOKEN)
        click(b, By.CSS_SELECTOR, "form button")
        wait_for(lambda: "Incidents" in b.title, 30, "the list after logging in")
        b.get(f"{url}/incidents/{iid}")
        click(b, By.CSS_SELECTOR, "#silence-form summary")
        form = "#silence-form form "
        matchers = attr_of(b, By.CSS_SELECTOR, form + "[name=matchers]", "value")
        assert matchers == 'alertname="Alert-x" target="t-x"'
        type_into(b, By.CSS_SELECTOR, form + "[name=duration]", "2h", clear=True)
        type_into(b, By.CSS_SELECTOR, form + "[name=comment]", "looking into it")
        screenshot(b, "incident-silence-form")
        click(b, By.ID, "silence")
        wait_for(lambda: b.current_url.endswith(f"/incidents/{iid}#timeline"), 30,
                 "the redirect back to the incident")
        (s,) = httpx.get(f"{url}/api/v2/silences",
                         headers={"Authorization": f"Bearer {WRITE_TOKEN}"}).json()
        assert {(m["name"], m["value"]) for m in s["matchers"]} == {
            ("alertname", "Alert-x"), ("target", "t-x")}
        assert s["comment"] == "looking into it" and s["createdBy"] == "lead"
    finally:
        app.stop(2)
