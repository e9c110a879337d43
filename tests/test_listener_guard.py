"""Every route of the listener checks Host (DNS rebinding) and bounds the body before reading it.

Real daemons on loopback: the Host check and the 413 apply to /healthz and
/metrics as to the API, the page, /login and /mcp; a 200 MB body to /login
costs the daemon no memory (RSS read from /proc of the daemon process).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_helpers import READ_TOKEN, WRITE_TOKEN
from fixtures_e2e import wait_for
from ha_helpers import Daemon

from sentinel.api.guard import MAX_BODY_BYTES, HostPolicy, host_of
from sentinel.config import load_config
from sentinel.daemon.app import App

pytestmark = pytest.mark.integration

ROUTES = [("GET", "/healthz"), ("GET", "/metrics"), ("GET", "/api/v1/incidents"),
          ("GET", "/"), ("POST", "/login"), ("POST", "/mcp")]


def _config(tmp: Path, listen: str = "127.0.0.1:0", extra: str = "") -> Path:
    cfg = tmp / "sentinel.yaml"
    cfg.write_text(f"database: sqlite:///{tmp / 's.db'}\nlisten: {listen}\n"
                   "external_url: http://sentinel.internal:9465\n"
                   f"api:\n  allowed_hosts: [grafana.example, '*.corp.example']\n"
                   f"  tokens:\n    - {{name: viewer, role: read, token: {READ_TOKEN}}}\n"
                   f"    - {{name: lead, role: write, token: {WRITE_TOKEN}}}\n" + extra)
    return cfg


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    app = App(load_config(_config(tmp_path_factory.mktemp("guard"))))
    app.start()
    host, port = app.status.address  # type: ignore[union-attr]
    yield f"http://{host}:{port}"
    app.stop(2)


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_a_rebound_name_is_refused_on_every_route(base: str, method: str, path: str) -> None:
    r = httpx.request(method, base + path, headers={"Host": "attacker.example:9465"})
    assert r.status_code == 421, r.text
    assert "attacker.example" in r.json()["error"]


@pytest.mark.parametrize("host", ["127.0.0.1:1", "localhost:9465", "[::1]:9465", "10.1.2.3",
                                  "sentinel.internal:9465", "grafana.example",
                                  "a.b.corp.example:80", "app.localhost"])
def test_ip_literals_loopback_external_url_and_allowed_names_are_served(base: str,
                                                                        host: str) -> None:
    r = httpx.get(base + "/healthz", headers={"Host": host})
    assert r.status_code == 200, r.text


def test_a_cross_origin_write_is_refused_and_a_same_origin_one_passes(base: str) -> None:
    bad = httpx.post(base + "/login", data={"token": WRITE_TOKEN},
                     headers={"Origin": "http://attacker.example"})
    assert bad.status_code == 403
    host = base.removeprefix("http://")
    good = httpx.post(base + "/login", data={"token": WRITE_TOKEN},
                      headers={"Origin": f"http://{host}"})
    assert good.status_code in (200, 303), good.text


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_a_declared_large_body_is_413_on_every_route(base: str, method: str, path: str) -> None:
    r = httpx.request("POST" if method == "GET" else method, base + path,
                      content=b"x" * (MAX_BODY_BYTES + 1))
    assert r.status_code == 413, r.text
    assert str(MAX_BODY_BYTES) in r.json()["error"]


def test_a_chunked_large_body_is_413(base: str) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b"x" * 65536

    r = httpx.post(base + "/login", content=chunks())
    assert r.status_code == 413


def test_a_body_within_the_limit_reaches_the_route(base: str) -> None:
    r = httpx.post(base + "/login", data={"token": "x" * 1000})
    assert r.status_code in (401, 403, 200), r.text  # the route answered, not the guard


def test_host_policy_parts() -> None:
    policy = HostPolicy.build("http://Sentinel.Internal.:9465/x", ["*.corp.example"])
    assert host_of("[::1]:80") == "[::1]" and host_of("a.b:80") == "a.b"
    assert host_of("::1") == "::1"
    assert policy.allows("sentinel.internal") and policy.allows("x.corp.example")
    assert not policy.allows("corp.example.attacker.net")
    assert not policy.allows("sentinel.internal.attacker.net")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_200_mb_login_is_413_and_costs_no_memory(tmp_path: Path) -> None:
    # Port 0, read back from the log: a port picked free here could be taken meanwhile.
    daemon = Daemon(tmp_path, "daemon", config=_config(tmp_path)).start()
    assert daemon.proc is not None
    proc = daemon.proc
    try:
        wait_for(lambda: daemon.port and _ok(f"http://127.0.0.1:{daemon.port}/healthz"), 60,
                 "the daemon")
        port = daemon.port
        before = _rss_kib(proc.pid)
        for chunked in (False, True):
            status = _send_big_login(port, 200 << 20, chunked)
            assert status == 413, (chunked, status)
        growth_mb = (_rss_kib(proc.pid) - before) / 1024
        assert growth_mb < 20, growth_mb
        assert _ok(f"http://127.0.0.1:{port}/healthz")
    finally:
        daemon.stop()


def _send_big_login(port: int, size: int, chunked: bool) -> int | None:
    """Send up to `size` bytes of body (or until the daemon stops reading); the status."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    head += (b"Transfer-Encoding: chunked\r\n\r\n" if chunked
             else f"Content-Length: {size}\r\n\r\n".encode())
    s.sendall(head)
    block = b"x" * 65536
    piece = (b"10000\r\n" + block + b"\r\n") if chunked else block
    sent = 0
    s.settimeout(0.5)
    try:
        deadline = time.monotonic() + 60
        while sent < size and time.monotonic() < deadline:
            try:
                s.sendall(piece)
                sent += len(block)
            except TimeoutError:
                break  # the daemon stopped reading: the answer is waiting
            except OSError:
                break  # closed after answering
        s.settimeout(10)
        data = b""
        while b"\r\n" not in data:
            more = s.recv(4096)
            if not more:
                break
            data += more
        return int(data.split()[1]) if data.startswith(b"HTTP/1.1") else None
    finally:
        s.close()


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
