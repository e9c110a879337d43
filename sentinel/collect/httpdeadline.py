"""A total deadline for one HTTP request, enforced at every socket operation.

httpx's timeouts bound each socket operation, not the request: a server
that sends a byte every second never trips a 10 s read timeout. A
`deadline_client` uses a network backend that clips every connect, read
and write to the time left before the deadline set by `deadline(...)` on
the current thread; outside such a block it behaves as a plain client.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import httpcore
import httpx

_local = threading.local()


@contextlib.contextmanager
def deadline(ends_at: float) -> Iterator[None]:
    """Within this block, sockets of a `deadline_client` give up at `ends_at` (monotonic)."""
    _local.ends_at = ends_at
    try:
        yield
    finally:
        _local.ends_at = None


def _clip(timeout: float | None, exc: type[Exception]) -> float | None:
    ends_at = getattr(_local, "ends_at", None)
    if ends_at is None:
        return timeout
    left = ends_at - time.monotonic()
    if left <= 0:
        raise exc("scrape deadline reached")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _clip(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _clip(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):  # type: ignore[no-untyped-def]
        clipped = _clip(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, clipped))

    def get_extra_info(self, info: str) -> object:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):  # type: ignore[no-untyped-def]
        clipped = _clip(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._inner.connect_tcp(host, port, clipped, local_address, socket_options)
        )

    def connect_unix_socket(self, path, timeout=None, socket_options=None):  # type: ignore[no-untyped-def]
        clipped = _clip(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, clipped, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def deadline_client() -> httpx.Client:
    """An httpx client whose connections obey `deadline(...)` blocks.

    Keep-alive connections expire after 4 s, under uvicorn's (vLLM's server)
    5 s default, so a reused connection is not one the server is closing.
    """
    transport = httpx.HTTPTransport()
    # httpx has no public hook for the network backend; swap the pool it
    # built for one that uses ours (same defaults otherwise).
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        max_connections=None,
        max_keepalive_connections=None,
        keepalive_expiry=4.0,
        network_backend=_DeadlineBackend(),
    )
    return httpx.Client(transport=transport, follow_redirects=True)
