"""Who may do what: writes need a write token (401 without, 403 with a read token), page
forms need the session's CSRF value, tokens never reach logs or the database, the page
escapes what it shows, and listening beyond loopback without a token is refused."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from api_helpers import READ_TOKEN, WRITE_TOKEN, auth
from secret_check import assert_no_secret_leak, database_texts
from sqlalchemy import insert, select

from sentinel.api.auth import BindRefused
from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents.models import Incident, IncidentAlert, TimelineEvent
from sentinel.incidents.models_api import ApiAudit, Approval

pytestmark = pytest.mark.integration
XSS = '<script>document.title="pwned"</script><img src=x onerror=alert(1)>'


def _config(tmp: Path, listen: str = "127.0.0.1:0", tokens: bool = True) -> Path:
    cfg = tmp / "sentinel.yaml"
    text = f"database: sqlite:///{tmp / 's.db'}\nlisten: {listen}\n"
    if tokens:
        text += (f"api:\n  tokens:\n    - {{name: viewer, role: read, token: {READ_TOKEN}}}\n"
                 f"    - {{name: lead, role: write, token: {WRITE_TOKEN}}}\n")
    cfg.write_text(text)
    return cfg


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[App, str]]:
    app = App(load_config(_config(tmp_path)))
    app.start()
    host, port = app.status.address  # type: ignore[union-attr]
    yield app, f"http://{host}:{port}"
    app.stop(2)


def plant(db, text: str = XSS) -> tuple[int, int]:  # noqa: ANN001
    """An open incident whose every shown field holds `text`, with a pending approval."""
    now = datetime.now(tz=UTC)
    with db.session() as s:
        iid = s.execute(insert(Incident).returning(Incident.id), [{
            "group_key": f"x/{text}", "alertname": f"Alert{text}", "target": f"t{text}",
            "status": "open", "severity": text, "summary": text, "labels": {"evil": text},
            "opened_at": now, "resolved_at": None, "updated_at": now, "category": text}]
        ).scalar_one()
        s.add(IncidentAlert(incident_id=iid, fingerprint="f" * 16, labels={"l": text},
                            annotations={"description": text}, state="firing", value=1.0,
                            value_recorded_at=None, active_at=now, fired_at=now,
                            resolved_at=None, notified_firing_at=None, notified_resolved_at=None))
        s.add(TimelineEvent(incident_id=iid, at=now, kind="log_excerpt", message=text, data={
            "excerpt": [f"line {text}"], "runbook": f"runbook {text}"}))
        s.add(TimelineEvent(incident_id=iid, at=now, kind="runbook", message=text,
                            data={"source": "static", "text": f"static runbook {text}"}))
        s.add(TimelineEvent(incident_id=iid, at=now, kind="note", message=text, data=None))
        approval = Approval(incident_id=iid, target="t", policy="p", step=0,
                            action="docker_restart", plan=text, alertname="A", labels={},
                            active_at=now, status="pending", requested_at=now,
                            expires_at=now.replace(year=now.year + 1), detail="")
        s.add(approval)
        s.flush()
        return iid, approval.id


WRITES = [
    ("POST", "/api/v1/approvals/{aid}/approve", None),
    ("POST", "/api/v1/approvals/{aid}/deny", None),
    ("POST", "/api/v2/silences", {"matchers": [{"name": "a", "value": "b", "isRegex": False}],
                                  "startsAt": "2026-01-01T00:00:00Z",
                                  "endsAt": "2036-01-01T00:00:00Z", "createdBy": "x",
                                  "comment": "c"}),
    ("DELETE", "/api/v2/silence/1", None),
]


def test_writes_need_a_write_token(daemon) -> None:  # noqa: ANN001
    app, url = daemon
    _, aid = plant(app.pipeline.tracker.db)
    for method, path, body in WRITES:
        path = path.format(aid=aid)
        r = httpx.request(method, url + path, json=body)
        assert r.status_code == 401, (path, r.text)
        assert r.headers["www-authenticate"].startswith("Bearer")
        # Each refusal says which token is missing (issue 35: not an empty `{}`).
        assert "needs a write token; none was sent" in r.json()["error"], r.text
        r = httpx.request(method, url + path, json=body, headers=auth(READ_TOKEN))
        assert r.status_code == 403, (path, r.text)
        assert "is a read token: this request needs a write token" in r.json()["error"]
        r = httpx.request(method, url + path, json=body, headers=auth("not-a-token-at-all-xx"))
        assert r.status_code == 401, (path, r.text)
        assert "matches none of the configured api.tokens" in r.json()["error"]
    # MCP: a write tool needs the write token; reading tools do not.
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "approve_action", "arguments": {"approval_id": aid}}}
    hdr = {"accept": "application/json, text/event-stream"}
    assert httpx.post(f"{url}/mcp", json=call, headers=hdr).status_code == 401
    assert httpx.post(f"{url}/mcp", json=call, headers=hdr | auth(READ_TOKEN)).status_code == 403
    # Page forms: no session → 401 page; a session without the CSRF value → 403.
    form = f"/incidents/1/approvals/{aid}/approve"
    assert httpx.post(url + form).status_code == 401
    with httpx.Client(base_url=url) as browser:
        assert browser.post("/login", data={"token": WRITE_TOKEN}).status_code == 303
        assert browser.post(form, data={"csrf": "forged"}).status_code == 403
        assert browser.post(form).status_code == 403
        # The session cookie holds the token's name, never the token.
        assert WRITE_TOKEN not in str(browser.cookies.jar)
    # Approved by nobody: still pending.
    a = httpx.get(f"{url}/api/v1/approvals").json()["approvals"][0]
    assert a["status"] == "pending"
    # Reading tools over /mcp answer on loopback without a token, structured.
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "list_approvals", "arguments": {}}}
    r = httpx.post(f"{url}/mcp", json=listing, headers=hdr)
    assert r.status_code == 200
    assert r.json()["result"]["structuredContent"]["approvals"][0]["id"] == aid
    # With the write token it goes through, audited with the token's name (over MCP too).
    deny = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "deny_action", "arguments": {"approval_id": aid}}}
    r = httpx.post(f"{url}/mcp", json=deny, headers=hdr | auth(WRITE_TOKEN))
    assert r.status_code == 200, r.text
    assert r.json()["result"]["structuredContent"]["status"] == "denied"
    with app.pipeline.tracker.db.session() as s:
        (row,) = s.scalars(select(ApiAudit)).all()
    assert (row.who, row.via, row.action) == ("lead", "mcp", f"deny approval {aid}")


def test_tokens_never_in_logs_or_database(daemon, caplog) -> None:  # noqa: ANN001
    caplog.set_level(logging.DEBUG)
    app, url = daemon
    db = app.pipeline.tracker.db
    _, aid = plant(db, "harmless")
    for token in (READ_TOKEN, WRITE_TOKEN, WRITE_TOKEN + "x"):
        for method, path, body in WRITES:
            httpx.request(method, url + path.format(aid=aid), json=body, headers=auth(token))
        httpx.get(f"{url}/api/v1/incidents", headers=auth(token))
    with httpx.Client(base_url=url) as browser:
        browser.post("/login", data={"token": WRITE_TOKEN})
        browser.get("/silences")
    audit = [t for t in database_texts(db) if t.startswith("api_audit")]
    assert any("lead" in t for t in audit)
    assert_no_secret_leak([READ_TOKEN, WRITE_TOKEN], texts=database_texts(db), caplog=caplog)


def test_page_escapes_everything_it_shows(daemon) -> None:  # noqa: ANN001
    app, url = daemon
    iid, _ = plant(app.pipeline.tracker.db)
    for path in ("/", f"/incidents/{iid}", "/fragments/incidents", "/targets", "/stats"):
        html = httpx.get(url + path).text
        assert "<script>document" not in html and "<img src=x" not in html, path
    html = httpx.get(f"{url}/incidents/{iid}").text
    # markupsafe writes a quote as &#34; (html.escape wrote &quot;): either is text.
    assert html.replace("&#34;", "&quot;").count(
        "&lt;script&gt;document.title=&quot;pwned&quot;&lt;/script&gt;") >= 8
    r = httpx.get(url + "/")
    assert "script-src 'self'" in r.headers["content-security-policy"]


def test_non_loopback_without_token_is_refused(tmp_path: Path) -> None:
    app = App(load_config(_config(tmp_path, "0.0.0.0:0", tokens=False)))
    with pytest.raises(BindRefused, match="not loopback.*api.tokens"):
        app.start()
    app = App(load_config(_config(tmp_path, "0.0.0.0:0", tokens=True)))
    app.start()
    try:
        port = app.status.address[1]  # type: ignore[union-attr]
        # Beyond loopback, reading needs a token too.
        assert httpx.get(f"http://127.0.0.1:{port}/api/v1/incidents").status_code == 401
        assert httpx.get(f"http://127.0.0.1:{port}/api/v1/incidents",
                         headers=auth(READ_TOKEN)).status_code == 200
    finally:
        app.stop(2)


def test_page_forms_create_and_expire_a_silence(daemon) -> None:  # noqa: ANN001
    import re

    app, url = daemon
    with httpx.Client(base_url=url) as browser:
        assert browser.post("/login", data={"token": READ_TOKEN}).status_code == 303
        html = browser.get("/silences").text
        assert "New silence" not in html  # a read token sees no forms
        browser.post("/login", data={"token": WRITE_TOKEN})
        html = browser.get("/silences").text
        csrf = re.search(r'name=csrf value="([0-9a-f]+)"', html).group(1)  # type: ignore[union-attr]
        r = browser.post("/silences", data={"csrf": csrf, "matchers": 'target="tpu-a"',
                                            "duration": "2h", "comment": "kernel upgrade"})
        assert r.status_code == 303
        (s,) = httpx.get(f"{url}/api/v2/silences").json()
        assert s["createdBy"] == "lead" and s["status"]["state"] == "active"
        r = browser.post(f"/silences/{s['id']}/expire", data={"csrf": csrf})
        assert r.status_code == 303
        assert httpx.get(f"{url}/api/v2/silences").json()[0]["status"]["state"] == "expired"
