"""Acting on an incident from the page in a real browser (Debian's chromium, headless):
acknowledge, owner, note (holding markup), silence from the incident and approve, each
submitted with the session's CSRF value and shown on the incident's timeline; and the
same acts through the JSON API, audited, refused without a write token."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from api_helpers import READ_TOKEN, WRITE_TOKEN, auth
from browser import (  # noqa: F401 (fixture)
    attr_of,
    browser,
    click,
    gone,
    loaded,
    screenshot,
    settled,
    text_of,
    type_into,
)
from fixtures_e2e import wait_for
from sqlalchemy import select
from test_api_security import _config, plant

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents.models_api import ApiAudit

pytestmark = pytest.mark.integration

FLAG = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'


def _start(tmp: Path, extra: str = "") -> tuple[App, str]:
    cfg = _config(tmp)
    cfg.write_text(cfg.read_text() + extra)
    app = App(load_config(cfg))
    app.start()
    host, port = app.status.address  # type: ignore[union-attr]
    return app, f"http://{host}:{port}"


def _timeline(b) -> str:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    return text_of(b, By.ID, "timeline")


def _submit(b, button_id: str, iid: int, fragment: str = "timeline") -> None:  # noqa: ANN001
    """Click a form's button and wait for the redirect back to the incident's timeline,
    loaded. While the old page is being replaced, chromedriver can answer any command on
    its nodes with a stale element or an inspector error: both mean it is gone."""
    from selenium.webdriver.common.by import By

    old = settled(lambda: b.find_element(By.TAG_NAME, "html"), "the page")

    def press() -> None:
        if not gone(old):  # clicked already if the page is on its way out: not twice
            b.find_element(By.ID, button_id).click()
    settled(press, f"clicking {button_id}")
    wait_for(lambda: gone(old) and b.current_url.endswith(f"/incidents/{iid}#{fragment}")
             and loaded(b), 30, f"the page back after {button_id}")


def test_acts_from_the_incident_page_land_on_the_timeline(
        tmp_path: Path, browser) -> None:  # noqa: ANN001,F811
    from selenium.webdriver.common.by import By

    b = browser
    app, url = _start(tmp_path, "web:\n  prometheus_url: http://prometheus.example:9090\n"
                      "  grafana_url: https://grafana.example/d/x?var-target={target}"
                      "&from={from_ms}&to={to_ms}\n")
    try:
        iid, aid = plant(app.pipeline.tracker.db, "-x")  # type: ignore[union-attr]
        b.get(f"{url}/incidents/{iid}")
        assert not b.find_elements(By.ID, "acknowledge")  # reading only: no forms
        assert "Log in with a write token" in text_of(b, By.ID, "incident-actions")
        b.get(f"{url}/login")
        type_into(b, By.NAME, "token", WRITE_TOKEN)
        click(b, By.CSS_SELECTOR, "form button")
        wait_for(lambda: "Incidents" in b.title, 30, "the list after logging in")
        b.get(f"{url}/incidents/{iid}")
        assert "not acknowledged" in text_of(b, By.ID, "ack-state")

        _submit(b, "acknowledge", iid)
        assert "acknowledged by lead" in text_of(b, By.ID, "ack-state")
        assert not b.find_elements(By.ID, "acknowledge")  # done once
        assert "acknowledged by lead: no more repeats or escalations" in _timeline(b)

        type_into(b, By.ID, "owner-input", "Ada Lovelace")
        _submit(b, "assign", iid)
        assert text_of(b, By.ID, "owner") == "Ada Lovelace"
        assert "owner set to Ada Lovelace by lead" in _timeline(b)

        type_into(b, By.ID, "note-text", f"restarted by hand {FLAG}")
        _submit(b, "add-note", iid)
        assert f"lead: restarted by hand {FLAG}" in _timeline(b)  # shown as text
        assert b.execute_script("return window.__xss") is None
        assert not b.find_elements(By.CSS_SELECTOR, "main script, main img")

        click(b, By.CSS_SELECTOR, "#silence-form summary")
        assert attr_of(b, By.ID, "silence-matchers", "value") == \
            'alertname="Alert-x" target="t-x"'
        type_into(b, By.ID, "silence-duration", "2h", clear=True)
        type_into(b, By.ID, "silence-comment", "looking into it")
        _submit(b, "silence", iid)
        (s,) = httpx.get(f"{url}/api/v2/silences").json()
        assert s["comment"] == "looking into it" and s["createdBy"] == "lead"
        row = text_of(b, By.CSS_SELECTOR, "#timeline tr.kind-silenced")
        assert f"silence {s['id']} by lead until" in row
        assert 'alertname="Alert-x" target="t-x"' in row

        _submit(b, f"approve-{aid}", iid, f"approval-{aid}")
        assert f"approval #{aid} approved by lead" in _timeline(b)

        links = settled(lambda: {a.text: a.get_attribute("href") for a in
                                 b.find_elements(By.CSS_SELECTOR, "#links a")}, "the links")
        assert links["Grafana"].startswith("https://grafana.example/d/x?var-target=t-x&from=")
        assert "Prometheus graph" not in links  # the planted alert has no rule expression
        screenshot(b, "incident-acts")
        b.get(f"{url}/")  # the list says who has it
        row = text_of(b, By.XPATH, f"//a[@href='/incidents/{iid}']/ancestor::tr")
        assert "ack lead" in row and "owner Ada Lovelace" in row
    finally:
        app.stop(2)


def test_acts_through_the_json_api(tmp_path: Path) -> None:
    app, url = _start(tmp_path)
    try:
        db = app.pipeline.tracker.db  # type: ignore[union-attr]
        iid, _ = plant(db, "-x")
        base = f"{url}/api/v1/incidents/{iid}"
        writes = [("acknowledge", None), ("owner", {"owner": "ada"}),
                  ("notes", {"text": "<b>hi</b>"}), ("silence", {"comment": "quiet"}),
                  ("diagnose", None)]
        for path, body in writes:
            assert httpx.post(f"{base}/{path}", json=body).status_code == 401, path
            assert httpx.post(f"{base}/{path}", json=body, headers=auth(READ_TOKEN)
                              ).status_code == 403, path
        # The page's forms: no session → 401; a session without the CSRF value → 403.
        acts = [f"/incidents/{iid}/{a}" for a in
                ("acknowledge", "owner", "notes", "silence", "diagnose")]
        with httpx.Client(base_url=url) as browser:
            for form in acts:
                assert browser.post(form).status_code == 401, form
            assert browser.post("/login", data={"token": WRITE_TOKEN}).status_code == 303
            for form in acts:
                assert browser.post(form, data={"csrf": "forged"}).status_code == 403, form
        w = auth(WRITE_TOKEN)
        r = httpx.post(f"{base}/acknowledge", headers=w)
        assert r.json() == {"incident": iid, "changed": True,
                            "message": f"incident #{iid} acknowledged"}
        assert not httpx.post(f"{base}/acknowledge", headers=w).json()["changed"]
        assert httpx.post(f"{base}/owner", json={"owner": "ada"}, headers=w).json()["changed"]
        assert httpx.post(f"{base}/notes", json={"text": "  "}, headers=w).status_code == 400
        assert httpx.post(f"{base}/notes", json={"text": "<b>hi</b>"}, headers=w).json()[
            "changed"]
        r = httpx.post(f"{base}/silence", json={"comment": "quiet", "duration": "30m"},
                       headers=w)
        assert r.status_code == 200, r.text
        sid = r.json()["silenceID"]
        (s,) = httpx.get(f"{url}/api/v2/silences").json()
        assert s["id"] == sid and {(m["name"], m["value"]) for m in s["matchers"]} == {
            ("alertname", "Alert-x"), ("target", "t-x")}
        # No diagnosis section: nothing would ever run it, so it is refused.
        assert httpx.post(f"{base}/diagnose", headers=w).status_code == 409
        assert httpx.post(f"{url}/api/v1/incidents/999999/acknowledge",
                          headers=w).status_code == 404
        d = httpx.get(base).json()
        assert d["incident"]["acknowledged_by"] == "lead" and d["incident"]["owner"] == "ada"
        kinds = [t["kind"] for t in d["timeline"]]
        assert {"acknowledged", "assigned", "silenced"} <= set(kinds)
        assert any(t["message"] == "lead: <b>hi</b>" for t in d["timeline"])
        with db.session() as session:
            audited = [(a.who, a.via, a.action, a.status) for a in session.scalars(
                select(ApiAudit).order_by(ApiAudit.id))]
        assert ("lead", "api", f"acknowledge incident {iid}", 200) in audited
        assert ("lead", "api", f"note incident {iid}", 400) in audited
        assert ("lead", "api", f"diagnose incident {iid}", 409) in audited
        assert ("lead", "api", "acknowledge incident 999999", 404) in audited
    finally:
        app.stop(2)


def test_links_out_are_encoded_and_only_http() -> None:
    from sentinel.api.links import incident_links
    from sentinel.config.web import WebConfig

    web = WebConfig.model_validate({
        "grafana_url": "https://g.example/d/v?var-target={target}&a={alertname}&from={from_ms}",
        "prometheus_url": "http://prom.example:9090/"})
    detail = {"incident": {"target": "tpu a&b", "alertname": "X"}, "alerts": [
        {"annotations": {"runbook_url": "https://wiki.example/runbooks/x"}},
        {"annotations": {"runbook_url": "javascript:alert(1)"}},
        {"annotations": {"runbook_url": "https://wiki.example/runbooks/x"}}]}
    links = incident_links(web, detail, 'rate(x{target="a"}[1m]) > 0.5', (0, 600_000))
    assert links == [
        {"name": "Grafana", "url": "https://g.example/d/v?var-target=tpu%20a%26b&a=X&from=0"},
        {"name": "Prometheus graph", "url": "http://prom.example:9090/graph?g0.expr=rate%28x%7B"
         "target%3D%22a%22%7D%5B1m%5D%29+%3E+0.5&g0.tab=0&g0.range_input=10m"},
        {"name": "runbook", "url": "https://wiki.example/runbooks/x"}]
    assert incident_links(None, detail, "x", (0, 1))[0]["name"] == "runbook"


def test_rerun_diagnosis_is_run_by_the_daemon_at_once(tmp_path: Path) -> None:
    """A diagnosis asked for through the API is claimed by the daemon's diagnosis job, which
    is woken for it (its interval here is an hour), and its answer lands on the timeline."""
    from sentinel.sim import start_sim

    model = start_sim()
    app, url = _start(tmp_path, f"diagnosis:\n  endpoints:\n    - {{name: gemma, url: {model.url}, "
                      "timeout: 10s}\n  interval: 1h\n  max_tokens: 256\n")
    try:
        iid, _ = plant(app.pipeline.tracker.db, "-x")  # type: ignore[union-attr]
        base = f"{url}/api/v1/incidents/{iid}"
        r = httpx.post(f"{base}/diagnose", headers=auth(WRITE_TOKEN))
        assert r.status_code == 200 and r.json()["changed"], r.text

        def answered() -> list[dict[str, object]]:
            d = httpx.get(base).json()
            if d["incident"]["diagnosis_requested_at"] is not None:
                return []  # not yet claimed
            asked = max(t["id"] for t in d["timeline"] if t["kind"] == "diagnosis_requested")
            # (The job's first run at start may answer too, if it met the planted incident.)
            return [t for t in d["timeline"] if t["id"] > asked and (
                (t["kind"] == "runbook" and (t["data"] or {}).get("source") == "model")
                or (t["data"] or {}).get("diagnosis") == "failed")]
        events = wait_for(answered, 30, "the requested diagnosis on the timeline")
        assert all(e["kind"] == "runbook" for e in events), events  # type: ignore[union-attr]
    finally:
        app.stop(2)
        model.stop()
