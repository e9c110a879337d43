"""Scrape auth, TLS and a proxy (issue 35), over loopback, in Prometheus's key names.

Real servers on 127.0.0.1: an HTTP server that demands a bearer token or basic auth; an
https server with a certificate from a CA made here (and one that demands a client
certificate); an HTTP proxy that answers absolute-form requests. The config is parsed as
the daemon parses it, so `*_file` secrets, inheritance from the top level and relative
paths are what a user gets.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sentinel.collect.scrape import Scraper, ScrapeTarget
from sentinel.config import parse_config
from sentinel.config.errors import ConfigError
from sentinel.daemon.app import App
from sentinel.store.memory import MemoryStore

PAGE = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"
TOKEN = "s3cr3t-metrics-token-0123456789"


class _Server:
    """A /metrics server on loopback that records each request's line and headers."""

    def __init__(self, *, auth: str | None = None, tls: ssl.SSLContext | None = None,
                 proxy: bool = False) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.seen.append((self.requestline, dict(self.headers)))
                if auth is not None and self.headers.get("Authorization") != auth:
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(PAGE)))
                self.end_headers()
                self.wfile.write(PAGE)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[list[_Server]]:
    made: list[_Server] = []
    yield made
    for s in made:
        s.stop()


def _scrape(cfg: Any, name: str = "a") -> tuple[bool, str | None]:
    """One scrape of the named target as the daemon builds it from the config."""
    target = next(t for t in cfg.targets if t.name == name)
    spec: ScrapeTarget = App._scrape_target(target)
    scraper = Scraper(MemoryStore(retention_ms=60_000))
    try:
        result = scraper.scrape(spec, 1_000)
    finally:
        scraper.close()
    return result.up, result.error


def test_a_bearer_token_from_a_file_is_sent_and_never_logged(tmp_path: Path, servers) -> None:
    server = _Server(auth=f"Bearer {TOKEN}")
    servers.append(server)
    (tmp_path / "token").write_text(TOKEN + "\n")
    cfg = parse_config({"targets": [{"name": "a", "url": server.url, "authorization": {
        "credentials_file": "token"}}]}, config_dir=tmp_path)
    assert _scrape(cfg) == (True, None)
    assert TOKEN in cfg.secrets()  # handed to the Redactor
    assert TOKEN not in repr(cfg.targets[0])


def test_without_the_token_the_scrape_fails_with_the_status(servers) -> None:
    server = _Server(auth=f"Bearer {TOKEN}")
    servers.append(server)
    up, error = _scrape(parse_config({"targets": [{"name": "a", "url": server.url}]}))
    assert not up and error is not None and "401" in error


def test_basic_auth_and_top_level_defaults(servers) -> None:
    basic = "Basic " + base64.b64encode(b"sentinel:pw").decode()
    bearer_server, basic_server = _Server(auth=f"Bearer {TOKEN}"), _Server(auth=basic)
    servers += [bearer_server, basic_server]
    cfg = parse_config({
        "authorization": {"credentials": TOKEN},  # the default every target inherits...
        "targets": [
            {"name": "a", "url": bearer_server.url},
            # ...unless it sets its own auth: then neither default auth key applies.
            {"name": "b", "url": basic_server.url,
             "basic_auth": {"username": "sentinel", "password": "pw"}},
        ]})
    assert _scrape(cfg, "a") == (True, None)
    assert _scrape(cfg, "b") == (True, None)
    with pytest.raises(ConfigError, match="authorization or basic_auth, not both"):
        parse_config({"targets": [{"name": "a", "url": basic_server.url,
                                   "authorization": {"credentials": "x"},
                                   "basic_auth": {"username": "u"}}]})


# -- TLS ---------------------------------------------------------------------------------------

def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject: str, key: Any, issuer: tuple[str, Any] | None, *, ca: bool = False,
          names: tuple[str, ...] = ()) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer if issuer else (subject, key)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        ), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(folder: Path, name: str, cert: x509.Certificate, key: Any) -> tuple[Path, Path]:
    c, k = folder / f"{name}.pem", folder / f"{name}.key"
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return c, k


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    ca_key = _key()
    ca = _cert("Sentinel test CA", ca_key, None, ca=True)
    server_key, client_key = _key(), _key()
    server = _cert("metrics.internal", server_key, ("Sentinel test CA", ca_key),
                   names=("metrics.internal",))
    client = _cert("sentinel", client_key, ("Sentinel test CA", ca_key))
    ca_pem, _ = _write(tmp_path, "ca", ca, ca_key)
    server_pem, server_key_pem = _write(tmp_path, "server", server, server_key)
    client_pem, client_key_pem = _write(tmp_path, "client", client, client_key)
    return {"ca": ca_pem, "server": server_pem, "server_key": server_key_pem,
            "client": client_pem, "client_key": client_key_pem, "dir": tmp_path}


def _tls_server(pki: dict[str, Path], *, client_cert: bool = False) -> _Server:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki["server"], pki["server_key"])
    if client_cert:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(pki["ca"])
    return _Server(tls=ctx)


def _tls_target(server: _Server, **tls: Any) -> Any:
    return parse_config({"targets": [{"name": "a", "url": server.url, "tls_config": tls}]})


def test_an_https_target_is_trusted_through_its_ca_file_and_server_name(pki, servers) -> None:
    server = _tls_server(pki)
    servers.append(server)
    up, error = _scrape(parse_config({"targets": [{"name": "a", "url": server.url}]}))
    assert not up and error is not None and "CERTIFICATE_VERIFY_FAILED" in error
    assert _scrape(_tls_target(server, ca_file=str(pki["ca"]))) == (True, None)
    assert _scrape(_tls_target(server, ca_file=str(pki["ca"]),
                               server_name="metrics.internal")) == (True, None)
    up, error = _scrape(_tls_target(server, ca_file=str(pki["ca"]), server_name="other.name"))
    assert not up and error is not None and "other.name" in error
    assert _scrape(_tls_target(server, insecure_skip_verify=True)) == (True, None)


def test_a_client_certificate_is_shown_when_the_server_demands_one(pki, servers) -> None:
    server = _tls_server(pki, client_cert=True)
    servers.append(server)
    up, _ = _scrape(_tls_target(server, ca_file=str(pki["ca"])))
    assert not up
    assert _scrape(_tls_target(server, ca_file=str(pki["ca"]), cert_file=str(pki["client"]),
                               key_file=str(pki["client_key"]))) == (True, None)


def test_tls_files_resolve_against_the_config_and_must_be_readable(pki) -> None:
    cfg = parse_config({"targets": [{"name": "a", "url": "https://127.0.0.1:1", "tls_config": {
        "ca_file": "ca.pem"}}]}, config_dir=pki["dir"])
    assert cfg.targets[0].tls_config is not None
    assert cfg.targets[0].tls_config.ca_file == str(pki["dir"] / "ca.pem")
    with pytest.raises(ConfigError, match="missing.pem"):
        parse_config({"targets": [{"name": "a", "url": "https://127.0.0.1:1", "tls_config": {
            "ca_file": "missing.pem"}}]}, config_dir=pki["dir"])


# -- proxy -------------------------------------------------------------------------------------

def test_an_http_proxy_gets_the_absolute_url(servers) -> None:
    proxy = _Server()  # answers the page itself: what matters is what it was asked
    servers.append(proxy)
    cfg = parse_config({"targets": [{"name": "a", "url": "http://vllm-7.internal:8000",
                                     "proxy_url": proxy.url,
                                     "authorization": {"credentials": TOKEN}}]})
    assert _scrape(cfg) == (True, None)
    ((line, headers),) = proxy.seen
    assert line == "GET http://vllm-7.internal:8000/metrics HTTP/1.1"
    assert headers["Host"] == "vllm-7.internal:8000"
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    with pytest.raises(ConfigError, match="not supported yet"):
        parse_config({"targets": [{"name": "a", "url": "https://vllm-7.internal:8443",
                                   "proxy_url": proxy.url}]})
