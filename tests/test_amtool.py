"""The real `amtool` (Debian's prometheus-alertmanager) against Sentinel's API v2 silences:
add, query, expire; the silenced alert sends nothing while a sibling alert is delivered."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_helpers import READ_TOKEN, WRITE_TOKEN
from fixtures_e2e import wait_for, write_config

from sentinel.config import load_config
from sentinel.daemon.app import App

pytestmark = pytest.mark.integration

RULES = """\
groups:
  - name: g
    interval: 200ms
    rules:
      - alert: LoudAlert
        expr: up == 1
        for: 2s
      - alert: QuietAlert
        expr: up == 1
        for: 2s
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
    cfg = write_config(tmp_path, [("tpu-a", sim.url)], sink.url, RULES)
    cfg.write_text(cfg.read_text() + f"""\
api:
  tokens:
    - {{name: amtool-user, role: write, token: {WRITE_TOKEN}}}
    - {{name: viewer, role: read, token: {READ_TOKEN}}}
""")
    app = App(load_config(cfg))
    app.start()
    host, port = app.status.address  # type: ignore[union-attr]
    yield app, f"http://{host}:{port}", tmp_path
    app.stop(2)


def _http_config(folder: Path, token: str) -> Path:
    path = folder / f"http-{token[:4]}.yaml"
    path.write_text(f"authorization:\n  type: Bearer\n  credentials: {token}\n")
    return path


def _run(amtool: str, url: str, http_config: Path | None, *args: str) -> str:
    cmd = [amtool, f"--alertmanager.url={url}", *args]
    if http_config is not None:
        cmd.insert(2, f"--http.config.file={http_config}")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "Warning" not in out.stderr, out.stderr  # e.g. the version warning (issue 53)
    return out.stdout


def test_amtool_add_query_expire_and_silenced_alert_sends_nothing(daemon, sink) -> None:  # noqa: ANN001
    amtool = _amtool()
    app, url, folder = daemon
    write = _http_config(folder, WRITE_TOKEN)
    read = _http_config(folder, READ_TOKEN)
    # Without a write token, amtool's add is refused.
    refused = subprocess.run([amtool, f"--alertmanager.url={url}", f"--http.config.file={read}",
                              "silence", "add", "alertname=QuietAlert", "--comment=x"],
                             capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0
    sid = _run(amtool, url, write, "silence", "add", "alertname=QuietAlert",
               "--comment=maintenance", "--duration=1h").strip()
    assert len(sid) == 36 and sid.count("-") == 4  # a UUID, as Alertmanager gives
    listed = _run(amtool, url, None, "silence", "query", "-o", "json")
    import json

    (silence,) = json.loads(listed)
    assert silence["id"] == sid and "amtool-user" in silence["createdBy"]
    assert silence["matchers"] == [{"name": "alertname", "value": "QuietAlert",
                                    "isRegex": False, "isEqual": True}]
    assert _run(amtool, url, None, "silence", "query", "-q").split() == [sid]
    # The loud alert is delivered; the silenced one never is.
    wait_for(lambda: any(a["labels"]["alertname"] == "LoudAlert"
                         for _, b, _ in list(sink.received) for a in b.get("alerts", [])),
             120, "the unsilenced alert to be delivered")
    # A few more evaluations (the outbox is flushed after each): the muted alert had its chances.
    evaluations = app.metrics.evaluations.labels("g")._value.get()
    wait_for(lambda: app.metrics.evaluations.labels("g")._value.get() >= evaluations + 2, 30,
             "two more evaluations")
    sent = {a["labels"]["alertname"] for _, b, _ in list(sink.received)
            for a in b.get("alerts", [])}
    assert "QuietAlert" not in sent
    incidents = httpx.get(f"{url}/api/v1/incidents?alertname=QuietAlert").json()["incidents"]
    assert incidents, "the silenced alert still opens an incident; only its pages are muted"
    _run(amtool, url, write, "silence", "expire", sid)
    assert _run(amtool, url, None, "silence", "query", "-q").split() == []
    expired = _run(amtool, url, None, "silence", "query", "--expired", "-q").split()
    assert expired == [sid]
