"""What every request to the listener passes first: the Host check and the body limit.

One ASGI wrapper around the whole app (/metrics, /healthz, the API, the page,
MCP), so no route can forget either:

- **Host** (DNS rebinding): a web page whose name is rebound to 127.0.0.1
  reaches the listener with its own name in `Host`. Allowed are IP literals
  (a rebinding needs a name), loopback names, the host of `external_url` and
  `api.allowed_hosts`; anything else gets 421 before any route runs. A request
  that changes something and carries an `Origin` must come from the same
  origin or an allowed name (403): a page elsewhere cannot post here.
- **Body**: a declared `Content-Length` above the limit gets 413 without a
  byte read; a chunked body is read up to the limit and gets 413 past it. A
  body within the limit is handed to the route as one message, so no route
  ever holds more than `max_body` of a request.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# The largest body any route takes: a silence or an approval is a few KiB, the
# API caps a comment at 64 KiB, an MCP call is one JSON-RPC message.
MAX_BODY_BYTES = 1 << 20
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class HostPolicy:
    """Which `Host` names the listener answers: IP literals, loopback names and `names`."""

    names: frozenset[str]

    @classmethod
    def build(cls, external_url: str, allowed: Iterable[str] = ()) -> HostPolicy:
        """The policy for a daemon with this external URL and allow-list."""
        names = {"localhost"} | {n.strip().lower().rstrip(".") for n in allowed if n.strip()}
        host = urlsplit(external_url).hostname if external_url else None
        if host:
            names.add(host.lower().rstrip("."))
        return cls(frozenset(names))

    def allows(self, host: str) -> bool:
        """Whether a host name (no port) may be answered."""
        host = host.strip().lower().rstrip(".")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        try:
            ipaddress.ip_address(host)
            return True
        except ValueError:
            pass
        if host in self.names or host.endswith(".localhost"):
            return True
        return any(n.startswith("*.") and host.endswith(n[1:]) for n in self.names)


def host_of(header: str) -> str:
    """The host part of a `Host` header value (`[::1]:80` → `[::1]`, `a:80` → `a`)."""
    header = header.strip()
    if header.startswith("["):
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class RequestGuard:
    """ASGI wrapper: refuses foreign Host names (421), cross-origin writes (403), bodies (413)."""

    def __init__(self, app: AsgiApp, policy: HostPolicy, max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.policy = policy
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _reply(send, *refusal)
            return
        body = await self._read_body(receive)
        if body is None:
            await _reply(send, 413, f"request body larger than {self.max_body} bytes "
                                    "(the listener's limit)")
            return
        await self.app(scope, _replay(body, receive), send)

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str] | None:
        host = headers.get("host")
        if host is not None and not self.policy.allows(host_of(host)):
            return 421, (f"Host {host_of(host)!r} is not served here: add it to "
                         "api.allowed_hosts or use external_url's host")
        origin = headers.get("origin")
        if (origin and origin != "null" and scope.get("method") not in _SAFE_METHODS
                and not self._same_origin(origin, host)):
            return 403, "a cross-origin request may not change anything here"
        length = headers.get("content-length")
        if length is not None:
            if not length.strip().isdigit():
                return 400, "malformed Content-Length"
            if int(length) > self.max_body:
                return 413, (f"request body of {int(length)} bytes is larger than "
                             f"{self.max_body} bytes (the listener's limit)")
        return None

    def _same_origin(self, origin: str, host: str | None) -> bool:
        netloc = urlsplit(origin).netloc.lower()
        if host is not None and netloc == host.strip().lower():
            return True
        name = urlsplit(origin).hostname or ""
        return name in self.policy.names and name != ""

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole body, or None once it passes the limit (the rest is never read)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)  # the client went away: the route sees an empty body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1")
            for k, v in scope.get("headers", [])}


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _reply(send: Send, status: int, error: str) -> None:
    # The body of the API's errors (sentinel/api/errors.py), so clients parse one shape.
    data = json.dumps({"status": "error", "error": error}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": data})
