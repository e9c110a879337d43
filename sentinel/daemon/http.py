"""Sentinel's one HTTP listener: /metrics, /healthz, /readyz, and whatever routes are added
(the API, the page, MCP at /mcp).

Served by uvicorn running a Starlette app in a background thread with its own
event loop. The stdlib server that was here sufficed for three tiny
endpoints; the page, the JSON API and above all MCP's streamable HTTP
transport (an ASGI app in the official `mcp` SDK) need an ASGI server, and one
listener for all of them keeps one address, one port and one place to check
tokens. Blocking handlers (database reads) run in Starlette's thread pool, so
a slow query never stalls the loop. The socket is bound in the constructor,
so the real port is known before serving starts (port 0 in tests) and a busy
port fails `start()` at once.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

log = logging.getLogger(__name__)

Lifespan = Callable[[], AbstractAsyncContextManager[None]]


class StatusServer:
    """Serves /metrics from a registry, /healthz (`healthy()` says why not: a stuck worker)
    and /readyz (`ready()` says why not), plus `routes`; `lifespans` run while serving
    (MCP's session manager)."""

    def __init__(
        self, host: str, port: int, registry: CollectorRegistry,
        ready: Callable[[], str | None], routes: Sequence[BaseRoute] = (),
        lifespans: Sequence[Lifespan] = (),
        healthy: Callable[[], str | None] = lambda: None,
        role: Callable[[], str] | None = None,
        guard: Callable[[Any], Any] | None = None,
    ) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: a response written in two sends (headers,
        # body) must not wait for the client's delayed ACK (Nagle: ~40 ms per request).
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._sock.bind((host, port))
            self._sock.listen(128)
        except OSError:
            self._sock.close()
            raise
        app = Starlette(routes=[*_status_routes(registry, ready, healthy, role), *routes],
                        lifespan=_combined(lifespans))
        # Every route behind the Host check and the body limit; without surfaces
        # (no API), loopback names and IP literals only.
        served = (guard or _default_guard)(app)
        config = uvicorn.Config(served, log_config=None, access_log=False, lifespan="on",
                                timeout_graceful_shutdown=2, server_header=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="sentinel-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) actually bound; the port is real even when 0 was asked for."""
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    def start(self, timeout_s: float = 10.0) -> None:
        """Serve in a background thread; returns once the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.should_exit = True
        self._thread.join(5)
        self._sock.close()


class WithoutCreated:
    """A registry's families without their `_created` samples, for the text exposition.

    prometheus_client writes a `<name>_created` line beside every counter,
    histogram and summary child; in the text format Prometheus takes each as
    one more series (client_golang writes none). Sentinel's per-target
    counters made them a third of its own /metrics: at 1,000 probed targets
    ~8,000 lines and ~0.1 s of CPU a render, paid at every scrape of Sentinel.
    Filtered here, not with prometheus_client's `disable_created_metrics()`:
    that is process-wide, and the simulator run in the same process (the demo,
    the tests) must keep them, as vLLM's page has them.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            if family.type in _HAS_CREATED:
                created = family.name + "_created"
                family.samples = [s for s in family.samples if s.name != created]
            yield family


_HAS_CREATED = frozenset({"counter", "histogram", "summary"})


def _status_routes(registry: CollectorRegistry, ready: Callable[[], str | None],
                   healthy: Callable[[], str | None],
                   role: Callable[[], str] | None = None) -> list[BaseRoute]:
    page = WithoutCreated(registry)

    def metrics(_request: Request) -> Response:
        return Response(generate_latest(page), media_type=CONTENT_TYPE_LATEST)

    def healthz(_request: Request) -> Response:
        why = healthy()
        if why is None:
            return PlainTextResponse("ok\n")
        return PlainTextResponse(f"unhealthy: stuck\n{why}\n", status_code=503)

    def readyz(_request: Request) -> Response:
        why = ready()
        # HA: a hot standby is ready too (it serves the API and keeps its store warm);
        # the body's second line says which role it has (sentinel/daemon/leader.py).
        extra = f"{role()}\n" if role is not None else ""
        if why is None:
            return PlainTextResponse("ready\n" + extra)
        return PlainTextResponse(f"not ready: {why}\n" + extra, status_code=503)

    return [Route("/metrics", metrics), Route("/healthz", healthz), Route("/readyz", readyz)]


def _default_guard(app: Any) -> Any:
    from sentinel.api.guard import HostPolicy, RequestGuard

    return RequestGuard(app, HostPolicy.build(""))


def _combined(lifespans: Sequence[Lifespan]) -> Any:
    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for make in lifespans:
                await stack.enter_async_context(make())
            yield
    return lifespan
