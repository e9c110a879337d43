"""Hostile parameters, cookies and sessions: a 4xx naming the problem, never a 500.

`since=inf`, ids above 2^63, `²` (a digit to str.isdigit, not to int), forged
cursors, a non-ASCII session cookie; logout ends the session for every copy of
its cookie; MCP keeps to the API's 64 KiB for a silence.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_helpers import READ_TOKEN, WRITE_TOKEN, auth

from sentinel.config import load_config
from sentinel.daemon.app import App

pytestmark = pytest.mark.integration


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("params")
    cfg = tmp / "sentinel.yaml"
    cfg.write_text(f"database: sqlite:///{tmp / 's.db'}\nlisten: 127.0.0.1:0\n"
                   f"api:\n  tokens:\n    - {{name: viewer, role: read, token: {READ_TOKEN}}}\n"
                   f"    - {{name: lead, role: write, token: {WRITE_TOKEN}}}\n")
    app = App(load_config(cfg))
    app.start()
    host, port = app.status.address  # type: ignore[union-attr]
    yield f"http://{host}:{port}"
    app.stop(2)


HOSTILE = [
    ("/api/v1/incidents?since=inf", "since"),
    ("/api/v1/incidents?since=-inf", "since"),
    ("/api/v1/incidents?since=nan", "since"),
    ("/api/v1/incidents?until=1e300", "until"),
    ("/api/v1/incidents?since=-1e300", "since"),
    ("/api/v1/incidents?since=99999999999999999y", "since"),
    ("/api/v1/incidents?since=9999-12-31T23:59:59-23:59", "since"),
    ("/api/v1/incidents?limit=%C2%B2", "limit"),
    ("/api/v1/incidents?limit=99999999999999999999999", "limit"),
    ("/api/v1/stats?since=inf", "since"),
    ("/api/v1/query?query=up&time=inf", "time"),
    ("/api/v1/query?query=up&time=1e300", "time"),
    ("/api/v1/incidents/%C2%B2", "id"),
    ("/api/v1/incidents/99999999999999999999", "id"),
    ("/api/v1/incidents/9223372036854775808", "id"),
    ("/api/v1/incidents?cursor=" + _cursor("99999999999999999999:1"), "cursor"),
    ("/api/v1/incidents?cursor=" + _cursor("1:99999999999999999999"), "cursor"),
    ("/api/v1/incidents?cursor=" + _cursor("-999999999999999999:1"), "cursor"),
    ("/api/v1/incidents?cursor=" + _cursor("١٢:٣"), "cursor"),
    ("/api/v1/incidents?cursor=%FF%FE", "cursor"),
]


@pytest.mark.parametrize(("path", "param"), HOSTILE)
def test_hostile_parameters_are_400_naming_the_parameter(base: str, path: str,
                                                         param: str) -> None:
    r = httpx.get(base + path)
    assert r.status_code == 400, r.text
    assert r.json()["param"] == param


@pytest.mark.parametrize("path", ["/incidents/%C2%B2", "/incidents/99999999999999999999"])
def test_hostile_ids_on_the_page_are_404(base: str, path: str) -> None:
    assert httpx.get(base + path).status_code == 404


def test_expiring_a_hostile_silence_id_is_404(base: str) -> None:
    for sid in ("%C2%B2", "99999999999999999999"):
        r = httpx.delete(f"{base}/api/v2/silence/{sid}", headers=auth(WRITE_TOKEN))
        assert r.status_code == 404, r.text


@pytest.mark.parametrize("cookie", ["é|write|99999999999|abc", "lead|write|²|x", "\u2603"])
def test_a_non_ascii_session_cookie_is_no_session(base: str, cookie: str) -> None:
    raw = f"sentinel_session={cookie}".encode()
    for path in ("/", "/api/v1/incidents", "/incidents"):
        r = httpx.get(base + path, headers={"cookie": raw})
        assert r.status_code < 500, (path, r.text)
    r = httpx.post(base + "/silences", headers={"cookie": raw, "x-csrf-token": "é".encode()})
    assert r.status_code in (401, 403)


def test_logout_revokes_the_session_for_every_copy(base: str) -> None:
    with httpx.Client(base_url=base) as browser:
        assert browser.post("/login", data={"token": WRITE_TOKEN}).status_code == 303
        stolen = browser.cookies.get("sentinel_session")
        assert stolen
        assert browser.get("/logout").status_code == 303
    r = httpx.post(f"{base}/api/v2/silences", json={}, cookies={"sentinel_session": stolen})
    assert r.status_code == 401, r.text  # a copy of the cookie is no session any more


def _mcp_silence(base: str, comment: str) -> dict:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "create_silence",
                       "arguments": {"matchers": ['alertname="X"'], "comment": comment,
                                     "duration": "1h"}}}
    r = httpx.post(f"{base}/mcp", json=call, headers=auth(WRITE_TOKEN) | {
        "accept": "application/json, text/event-stream"})
    assert r.status_code == 200, r.text
    return r.json()["result"]


def test_mcp_keeps_to_the_apis_silence_size(base: str) -> None:
    before = len(httpx.get(f"{base}/api/v2/silences").json())
    assert _mcp_silence(base, "c" * 900_000).get("isError") is True
    assert len(httpx.get(f"{base}/api/v2/silences").json()) == before
    assert not _mcp_silence(base, "c" * 1000).get("isError")  # the size, not the call
    assert len(httpx.get(f"{base}/api/v2/silences").json()) == before + 1
