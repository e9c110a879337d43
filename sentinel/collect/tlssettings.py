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
