"""Assemble what the daemon's listener serves beyond /metrics: API, page, MCP at /mcp."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.routing import BaseRoute, Route

from sentinel.api.auth import Auth, is_loopback
from sentinel.api.guard import AsgiApp, HostPolicy, RequestGuard
from sentinel.api.mcp_server import LocalBackend, McpGate, build_server
from sentinel.api.routes import api_routes, data_source_routes, reload_route
from sentinel.api.service import ApiService
from sentinel.config.api import ApiConfig
from sentinel.web.routes import web_routes


@dataclass
class Surfaces:
    """Routes and lifespans for the StatusServer, and the service behind them."""

    routes: list[BaseRoute]
    lifespans: list[Callable[[], contextlib.AbstractAsyncContextManager[None]]]
    service: ApiService
    auth: Auth
    policy: HostPolicy

    def guard(self, app: AsgiApp) -> AsgiApp:
        """The whole listener behind the Host check and the body limit (sentinel/api/guard.py)."""
        return RequestGuard(app, self.policy)


def build_surfaces(service: ApiService, api: ApiConfig, host: str,
                   reload: Callable[[], Any] | None = None) -> Surfaces:
    """The API, page and MCP routes over one service, with tokens from `api`; with
    `reload` (the daemon's), `POST /-/reload`."""
    from mcp.server.streamable_http_manager import (
        StreamableHTTPASGIApp,
        StreamableHTTPSessionManager,
    )
    from mcp.server.transport_security import TransportSecuritySettings

    auth = Auth(api.tokens, reads_open=is_loopback(host))
    mcp = build_server(LocalBackend(service))
    # Host and Origin are checked for every route, /mcp included, by RequestGuard:
    # the SDK's own check (loopback names only) would be a second list to keep in step.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    manager = StreamableHTTPSessionManager(app=mcp._lowlevel_server, json_response=True,
                                           stateless=True, security_settings=security)
    gate: Any = McpGate(StreamableHTTPASGIApp(manager), auth)

    @contextlib.asynccontextmanager
    async def mcp_lifespan() -> AsyncIterator[None]:
        async with manager.run():
            yield

    routes: list[BaseRoute] = [*api_routes(service, auth), *data_source_routes(service, auth),
                               *web_routes(service, auth),
                               Route("/mcp", gate)]
    if reload is not None:
        routes.append(reload_route(auth, reload))
    policy = HostPolicy.build(service.external_url, api.allowed_hosts)
    return Surfaces(routes, [mcp_lifespan], service, auth, policy)


def rule_expr_lookup(groups: Callable[[], list[Any]]) -> Callable[[str], str | None]:
    """alertname → the expression of the (first) rule of that name in the loaded groups."""
    def lookup(alertname: str) -> str | None:
        for g in groups():
            for rule in g.rules:
                if rule.name == alertname:
                    return str(rule.expr)
        return None
    return lookup
