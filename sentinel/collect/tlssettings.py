"""TLS for a scrape: the settings (plain data, comparable) and the SSLContext built from them.

A context is built once per distinct settings and shared: loading a CA file and a
client certificate per scrape would cost a file read and a parse each time.
"""

from __future__ import annotations

import ssl
import threading
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TLSSettings:
    """Prometheus's tls_config: a CA to trust, a client certificate, the expected name."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    insecure_skip_verify: bool = False


_contexts: dict[TLSSettings, ssl.SSLContext] = {}
_lock = threading.Lock()


def tls_context(settings: TLSSettings) -> ssl.SSLContext:
    """The SSLContext for `settings` (built on first use; OSError/SSLError when a file is bad)."""
    with _lock:
        ctx = _contexts.get(settings)
        if ctx is None:
            ctx = _contexts[settings] = _build(settings)
        return ctx


def _build(s: TLSSettings) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=s.ca_file)
    if s.cert_file is not None and s.key_file is not None:
        ctx.load_cert_chain(s.cert_file, s.key_file)
    if s.insecure_skip_verify:  # the operator's explicit choice, as in Prometheus
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


@dataclass(frozen=True, slots=True)
class TLSProblem:
    """Why a tls_config cannot be used: the key (`ca_file`, `cert_file`), the file and the fix."""

    key: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"tls_config.{self.key} {self.path}: {self.message}"


def tls_problem(s: TLSSettings) -> TLSProblem | None:
    """What is wrong with the files of `s`, loaded as a scrape loads them; None when fine.

    `check config` and the scraper both call this, so a CA file that is not a
    certificate is refused before `run` and named once by `run`, not raised as an
    ssl.SSLError on every scrape.
    """
    if s.ca_file is not None:
        try:
            ssl.create_default_context(cafile=s.ca_file)
        except (ssl.SSLError, OSError, ValueError) as exc:
            return TLSProblem("ca_file", s.ca_file, _why(exc, "a CA certificate (or a bundle "
                              "of them) in PEM, the file that begins -----BEGIN CERTIFICATE-----"))
    if s.cert_file is not None and s.key_file is not None:
        try:
            ssl.create_default_context().load_cert_chain(s.cert_file, s.key_file)
        except (ssl.SSLError, OSError, ValueError) as exc:
            return TLSProblem("cert_file", s.cert_file, _why(exc, "the client certificate in "
                              "PEM, and key_file its private key (-----BEGIN ... PRIVATE KEY-----, "
                              "not encrypted), the two of one pair"))
    return None


def _why(exc: BaseException, want: str) -> str:
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
    return f"cannot be loaded as TLS loads it ({reason}): it must be {want}"
