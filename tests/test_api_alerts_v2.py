"""Alertmanager API v2 alert reads and UUID silences (issue 35), against real clients.

The daemon fires three alerts on one target: LoudAlert (active), QuietAlert
(silenced through amtool) and InhibitedAlert (inhibited by LoudAlert through a
shipped-style inhibition rule). Debian's real `amtool` reads them with `alert
query` (its default shows active alerts only, `-s` silenced, `-i` inhibited,
matchers filter) and `silence query`; the responses of `/api/v2/alerts`,
`/api/v2/alerts/groups` and the silences are validated against Alertmanager's
own OpenAPI definitions, read from the installed `prometheus-alertmanager`
binary (go-swagger embeds its spec there; nothing of it is copied into this
repository).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from api_helpers import READ_TOKEN, WRITE_TOKEN
from fixtures_e2e import wait_for, write_config

from sentinel.config import load_config
from sentinel.daemon.app import App

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")

RULES = """\
groups:
  - name: g
    interval: 200ms
    rules:
      - alert: LoudAlert
        expr: up == 1
        keep_firing_for: 1m  # a slow scrape on a busy machine resolves nothing
        labels: {severity: page}
        annotations: {summary: "{{ $labels.target }} is loud"}
      - alert: QuietAlert
        expr: up == 1
        keep_firing_for: 1m  # a slow scrape on a busy machine resolves nothing
      - alert: InhibitedAlert
        expr: up == 1
        keep_firing_for: 1m  # a slow scrape on a busy machine resolves nothing
"""

NOTIFY = f"""\
api:
  tokens:
    - {{name: amtool-user, role: write, token: {WRITE_TOKEN}}}
    - {{name: viewer, role: read, token: {READ_TOKEN}}}
notify:
  route: {{receiver: oncall, group_by: [target], group_wait: 0s}}
  inhibit_rules:
    - source_matchers: ['alertname="LoudAlert"']
      target_matchers: ['alertname="InhibitedAlert"']
      equal: [target]
"""


def _amtool() -> str:
    path = shutil.which("amtool")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("amtool (prometheus-alertmanager) is required under CI=true")
        pytest.skip("amtool not installed (apt-get install prometheus-alertmanager)")
    return path


@pytest.fixture
def daemon(tmp_path: Path, sim, sink) -> Iterator[tuple[App, str, Path]]:  # noqa: ANN001
    cfg = write_config(tmp_path, [("tpu-a", sim.url)], sink.url, RULES, scrape_interval="1s")
    cfg.write_text(cfg.read_text() + NOTIFY)
    app = App(load_config(cfg))
    app.start()
    host, port = app.status.address  # type: ignore[union-attr]
    url = f"http://{host}:{port}"
    try:
        wait_for(lambda: len(httpx.get(f"{url}/api/v2/alerts", timeout=5).json()) == 3, 30,
                 "three alerts in /api/v2/alerts")
        yield app, url, tmp_path
    finally:
        app.stop(2)


def _amtool_run(url: str, folder: Path, token: str | None, *args: str) -> str:
    cmd = [_amtool(), f"--alertmanager.url={url}", *args]
    if token is not None:
        path = folder / f"http-{token[:4]}.yaml"
        path.write_text(f"authorization:\n  type: Bearer\n  credentials: {token}\n")
        cmd.insert(2, f"--http.config.file={path}")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "version" not in out.stderr, out.stderr  # no "amtool version ... are different"
    return out.stdout


def _names(alerts: list[dict[str, Any]]) -> list[str]:
    return sorted(a["labels"]["alertname"] for a in alerts)


@pytest.mark.integration
def test_amtool_alert_query_and_silence_query(daemon) -> None:  # noqa: ANN001
    _app, url, folder = daemon
    sid = _amtool_run(url, folder, WRITE_TOKEN, "silence", "add", "alertname=QuietAlert",
                      "--comment=maintenance", "--duration=1h").strip()
    assert UUID.match(sid), sid
    wait_for(lambda: httpx.get(f"{url}/api/v2/alerts?silenced=false").json()
             and len(httpx.get(f"{url}/api/v2/alerts?silenced=false").json()) == 2, 15,
             "the silence to apply")
    # amtool's default: active alerts only (neither silenced nor inhibited).
    shown = json.loads(_amtool_run(url, folder, None, "alert", "query", "-o", "json"))
    assert _names(shown) == ["LoudAlert"]
    (loud,) = shown
    assert loud["status"] == {"state": "active", "silencedBy": [], "inhibitedBy": []}
    assert loud["receivers"] == [{"name": "oncall"}]
    assert loud["annotations"] == {"summary": "tpu-a is loud"}
    silenced = json.loads(_amtool_run(url, folder, None, "alert", "query", "-s", "-o", "json"))
    assert [(a["labels"]["alertname"], a["status"]["state"], a["status"]["silencedBy"])
            for a in silenced] == [("QuietAlert", "suppressed", [sid])]
    inhibited = json.loads(_amtool_run(url, folder, None, "alert", "query", "-i", "-o", "json"))
    assert [(a["labels"]["alertname"], a["status"]["inhibitedBy"]) for a in inhibited] == [
        ("InhibitedAlert", [loud["fingerprint"]])]
    # Matchers filter, as amtool sends them (`filter=alertname="LoudAlert"`).
    both = json.loads(_amtool_run(url, folder, None, "alert", "query", "-a", "-s",
                                  "alertname=~.+Alert", "target=tpu-a", "-o", "json"))
    assert _names(both) == ["LoudAlert", "QuietAlert"]
    assert json.loads(_amtool_run(url, folder, None, "alert", "query", "alertname=Nope",
                                  "-o", "json")) == []
    # The simple (table) output amtool users read.
    table = _amtool_run(url, folder, READ_TOKEN, "alert", "query")
    assert "LoudAlert" in table and "QuietAlert" not in table
    # Silences: the UUID is the id amtool lists, queries and expires.
    (listed,) = json.loads(_amtool_run(url, folder, None, "silence", "query", "-o", "json"))
    assert listed["id"] == sid and listed["status"]["state"] == "active"
    assert _amtool_run(url, folder, None, "silence", "query", "-q").split() == [sid]
    _amtool_run(url, folder, WRITE_TOKEN, "silence", "expire", sid)
    assert _amtool_run(url, folder, None, "silence", "query", "-q").split() == []
    wait_for(lambda: len(httpx.get(f"{url}/api/v2/alerts?silenced=false").json()) == 3, 15,
             "the expired silence to stop applying")


def _embedded_spec() -> dict[str, Any]:
    """The OpenAPI 2.0 spec go-swagger compiled into Debian's Alertmanager binary."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("prometheus-alertmanager is required under CI=true")
        pytest.skip("prometheus-alertmanager not installed (its binary carries the spec)")
    data = Path(binary).read_bytes()
    at = data.find(b'"swagger": "2.0"')
    assert at > 0, f"no embedded OpenAPI spec in {binary}"
    start = data.rfind(b"{\n", 0, at)
    spec, _end = json.JSONDecoder().raw_decode(data[start:].decode("utf-8", "replace"))
    assert "gettableAlert" in spec["definitions"], "not Alertmanager's API v2 spec"
    return dict(spec)


def _validator(definition: str) -> jsonschema.Draft4Validator:
    spec = _embedded_spec()
    checker = jsonschema.FormatChecker()

    @checker.checks("date-time", raises=ValueError)
    def _rfc3339(value: object) -> bool:
        # RFC 3339 with a zone, as Go's time.Time parses it (jsonschema checks date-time
        # only with an extra package; checked here without it).
        assert isinstance(value, str)
        if not re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$", value):
            raise ValueError(value)
        datetime.fromisoformat(value.replace("Z", "+00:00"))
        return True

    return jsonschema.Draft4Validator({"$ref": f"#/definitions/{definition}",
                                       "definitions": spec["definitions"]},
                                      format_checker=checker)


@pytest.mark.integration
def test_responses_validate_against_alertmanagers_openapi_spec(daemon) -> None:  # noqa: ANN001
    _app, url, _folder = daemon
    created = httpx.post(f"{url}/api/v2/silences", headers={
        "Authorization": f"Bearer {WRITE_TOKEN}"}, json={
        "matchers": [{"name": "alertname", "value": "QuietAlert", "isRegex": False}],
        "startsAt": "2020-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z",
        "createdBy": "t", "comment": "c"}, timeout=5)
    assert created.status_code == 200, created.text
    sid = created.json()["silenceID"]
    assert UUID.match(sid)
    wait_for(lambda: any(a["status"]["silencedBy"] == [sid] for a in
                         httpx.get(f"{url}/api/v2/alerts").json()), 15, "the silence to apply")

    groups = httpx.get(f"{url}/api/v2/alerts/groups", timeout=5).json()
    _validator("alertGroups").validate(groups)
    assert [(g["labels"], g["receiver"], _names(g["alerts"])) for g in groups] == [
        ({"target": "tpu-a"}, {"name": "oncall"},
         ["InhibitedAlert", "LoudAlert", "QuietAlert"])]
    alerts = httpx.get(f"{url}/api/v2/alerts", timeout=5).json()
    _validator("gettableAlerts").validate(alerts)
    for a in alerts:
        assert re.match(r"^[0-9a-f]{16}$", a["fingerprint"])
        assert a["generatorURL"].startswith("http")
    _validator("gettableSilences").validate(httpx.get(f"{url}/api/v2/silences").json())
    _validator("gettableSilence").validate(httpx.get(f"{url}/api/v2/silence/{sid}").json())
    # The validator is not a pushover: a gettableAlert without status fails.
    with pytest.raises(jsonschema.ValidationError):
        _validator("gettableAlerts").validate([{k: v for k, v in alerts[0].items()
                                                if k != "status"}])
    # The filters of the spec's parameters.
    def names(query: str, path: str = "alerts") -> list[str]:
        resp = httpx.get(f"{url}/api/v2/{path}?{query}", timeout=5)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        if path == "alerts/groups":
            body = [a for g in body for a in g["alerts"]]
        return _names(body)

    assert names("active=false") == ["InhibitedAlert", "QuietAlert"]
    assert names("silenced=false&inhibited=false") == ["LoudAlert"]
    assert names("silenced=false", "alerts/groups") == ["InhibitedAlert", "LoudAlert"]
    assert names('filter=alertname="LoudAlert"&filter=severity=page') == ["LoudAlert"]
    assert names("filter=alertname=~Loud.*", "alerts/groups") == ["LoudAlert"]
    assert names("receiver=onc.*") == ["InhibitedAlert", "LoudAlert", "QuietAlert"]
    assert names("receiver=onc") == []  # anchored, as Alertmanager's
    assert names("unprocessed=false") == ["InhibitedAlert", "LoudAlert", "QuietAlert"]
    bad = httpx.get(f"{url}/api/v2/alerts?filter=alertname", timeout=5)
    assert bad.status_code == 400 and "filter" in bad.text
    assert httpx.get(f"{url}/api/v2/alerts?active=maybe").status_code == 400


def test_silences_made_before_uuids_keep_their_integer_ids(db_url: str) -> None:
    """Migration 0011 on SQLite and PostgreSQL: an existing silence gets a UUID, and the
    integer id clients were given before still fetches and expires it."""
    from sqlalchemy import text

    from sentinel.api.auth import Principal
    from sentinel.api.service import ApiService
    from sentinel.incidents.db import Database

    db = Database(db_url)
    try:
        db.upgrade("0009")
        with db.session() as s:
            s.execute(text(
                "INSERT INTO silences (id, matchers, starts_at, ends_at, created_by, comment, "
                "created_at) VALUES (7, :m, :t0, :t1, 'ops', 'old one', :t0)"),
                {"m": json.dumps([["alertname", "=", "X"]]), "t0": datetime(2026, 1, 1),
                 "t1": datetime(2099, 1, 1)})
        db.upgrade()
        service = ApiService(db)
        (listed,) = service.silences()
        assert UUID.match(listed["id"]) and listed["comment"] == "old one"
        assert service.silence("7") == listed == service.silence(listed["id"])
        service.expire_silence("7", Principal("t", "write", "bearer"), "api")
        assert service.silence(listed["id"])["status"]["state"] == "expired"
        # A new silence gets a UUID of its own.
        new = service.create_silence({
            "matchers": [{"name": "a", "value": "b", "isRegex": False}],
            "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z",
            "createdBy": "t", "comment": "c"}, Principal("t", "write", "bearer"), "api")
        assert UUID.match(new["silenceID"]) and new["silenceID"] != listed["id"]
    finally:
        db.dispose()
