"""Keep google client libraries off the network in tests, and prove they stayed off.

`offline_google_env` points every way google-auth could find a metadata
server or credentials at nothing (an unroutable loopback port, no ADC
file). `connections()` yields a list that collects the address of every
socket connect made meanwhile (via a `sys.addaudithook`, which sees the
libraries' own sockets, not only ours), so a test can assert all were
loopback.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

_lock = threading.Lock()
_sinks: list[list[str]] = []
_installed = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "socket.connect" or not _sinks:
        return
    address = args[1]
    host = str(address[0]) if isinstance(address, tuple) else str(address)
    with _lock:
        for sink in _sinks:
            sink.append(host)


@contextmanager
def connections() -> Iterator[list[str]]:
    """The hosts of every socket connect made inside the block."""
    global _installed
    with _lock:
        if not _installed:
            sys.addaudithook(_hook)  # cannot be removed; idle when no sink listens
            _installed = True
        sink: list[str] = []
        _sinks.append(sink)
    try:
        yield sink
    finally:
        with _lock:
            _sinks.remove(sink)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1, or a Unix socket path."""
    return host.startswith("127.") or host in ("::1", "localhost") or host.startswith("/")


def offline_google_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No metadata server, no ADC file, no project from the environment."""
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:1")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:1")
    monkeypatch.setenv("GOOGLE_CLOUD_DISABLE_GRPC", "true")
    monkeypatch.setenv("CLOUDSDK_CONFIG", "/nonexistent/sentinel-test-gcloud")
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT"):
        monkeypatch.delenv(name, raising=False)
