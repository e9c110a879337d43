"""MCP tools over Sentinel's history, built with the official `mcp` SDK (`MCPServer`).

The same tools run two ways:
- `sentinel mcp` on stdio: a thin client of the daemon's HTTP API
  (`HttpBackend`, with `$SENTINEL_TOKEN` as bearer token), so answers are
  exactly the API's, live series included;
- inside the daemon at `/mcp` (streamable HTTP, stateless, JSON responses)
  over the API service directly (`LocalBackend`). A gate in front reads the
  JSON-RPC body: reading needs what the API's reads need, and calling a write
  tool needs a write token (401/403 as the API answers).

Results are structured JSON and bounded (rows, timeline events and text cut
to fixed sizes, with a `truncated` flag), so an assistant's context never
fills with one huge incident.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

import anyio.to_thread
import httpx

from sentinel.api.auth import ANONYMOUS, Auth, Principal
from sentinel.api.errors import ApiError
from sentinel.api.service import ApiService

MAX_ROWS = 100
MAX_TIMELINE = 200
MAX_TEXT = 2000
WRITE_TOOLS = frozenset({"create_silence", "approve_action", "deny_action",
                         "acknowledge_incident", "add_incident_note"})
TOOLS = ("list_incidents", "get_incident", "incident_stats", "target_health", "query",
         "list_silences", "create_silence", "list_approvals", "approve_action", "deny_action",
         "acknowledge_incident", "add_incident_note")

_principal: contextvars.ContextVar[Principal] = contextvars.ContextVar(
    "sentinel_mcp_principal", default=ANONYMOUS)


class Backend(Protocol):
    """Where the tools get their answers: the API over HTTP, or the service in-process."""

    def get(self, path: str, params: dict[str, str]) -> Any:
        """A read (path under /api)."""
        ...

    def write(self, method: str, path: str, body: Any, who: Principal) -> Any:
        """A write (path under /api)."""
        ...


class HttpBackend:
    """Calls the daemon's API (stdio mode)."""

    def __init__(self, base_url: str, token: str | None = None,
                 client: httpx.Client | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = client or httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                             timeout=30)

    def get(self, path: str, params: dict[str, str]) -> Any:
        return self._answer(self.client.get(path, params=params))

    def write(self, method: str, path: str, body: Any, who: Principal) -> Any:
        return self._answer(self.client.request(method, path, json=body))

    @staticmethod
    def _answer(r: httpx.Response) -> Any:
        data = r.json() if r.content else {}
        if r.status_code >= 400:
            msg = data.get("error", r.text) if isinstance(data, dict) else r.text
            raise ValueError(f"HTTP {r.status_code}: {msg}")
        return data


class LocalBackend:
    """Calls the API service in the daemon's process (the /mcp route)."""

    def __init__(self, service: ApiService) -> None:
        self.service = service

    def get(self, path: str, params: dict[str, str]) -> Any:
        s = self.service
        try:
            if path == "/api/v1/incidents":
                return s.incidents(params)
            if path.startswith("/api/v1/incidents/"):
                return s.incident(int(path.rsplit("/", 1)[1]))
            if path == "/api/v1/stats":
                return s.stats(params)
            if path == "/api/v1/targets":
                return s.target_health()
            if path == "/api/v1/query":
                out = s.query(params)
                out.pop("_http_status", None)
                return out
            if path == "/api/v1/approvals":
                return s.approvals(params.get("status"))
            if path == "/api/v2/silences":
                return s.silences()
        except ApiError as exc:
            raise ValueError(exc.message) from None
        raise ValueError(f"unknown path {path}")

    def write(self, method: str, path: str, body: Any, who: Principal) -> Any:
        s = self.service
        try:
            if path == "/api/v2/silences":
                return s.create_silence(body, who, "mcp")
            parts = path.strip("/").split("/")  # api v1 approvals ID verb
            if parts[:3] == ["api", "v1", "approvals"] and len(parts) == 5:
                return s.decide(int(parts[3]), parts[4] == "approve", who, "mcp")
            if parts[:3] == ["api", "v1", "incidents"] and len(parts) == 5:
                if parts[4] == "acknowledge":
                    return s.acknowledge(int(parts[3]), who, "mcp")
                if parts[4] == "notes":
                    return s.add_note(int(parts[3]), str((body or {}).get("text", "")), who,
                                      "mcp")
        except ApiError as exc:
            raise ValueError(exc.message) from None
        raise ValueError(f"unknown path {path}")


def _bounded(value: Any, rows: int = MAX_ROWS) -> Any:
    """Cut lists and long strings so a tool result stays small."""
    if isinstance(value, str):
        return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + "…"
    if isinstance(value, list):
        return [_bounded(v, rows) for v in value[:rows]]
    if isinstance(value, dict):
        return {k: _bounded(v, rows) for k, v in value.items()}
    return value


def build_server(backend: Backend) -> Any:
    """The MCPServer with the ten tools."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("sentinel", instructions=(
        "Sentinel's incident history for vLLM fleets: incidents, stats (time to detect, "
        "recover, resolve), target health, PromQL over live series, silences, approvals."))

    async def run(fn: Callable[[], Any]) -> Any:
        return await anyio.to_thread.run_sync(fn)

    def params(**kw: Any) -> dict[str, str]:
        return {k: str(v) for k, v in kw.items() if v not in (None, "")}

    @server.tool(description="Incidents newest first; filters as the API's; bounded to 100. "
                             "A fleet incident carries `fleet` (members now, joined).")
    async def list_incidents(status: str | None = None, alertname: str | None = None,
                             target: str | None = None, category: str | None = None,
                             since: str | None = None, until: str | None = None,
                             limit: int = 20, cursor: str | None = None) -> dict[str, Any]:
        p = params(status=status, alertname=alertname, target=target, category=category,
                   since=since, until=until, limit=min(max(limit, 1), MAX_ROWS), cursor=cursor)
        return _bounded(await run(lambda: backend.get("/api/v1/incidents", p)))

    @server.tool(description="One incident: alerts, timeline (newest 200), runbook, actions, "
                             "approvals, notifications; a fleet incident's members (count "
                             "now and at peak, breakdown, up to 200 listed); a member's "
                             "fleet incident.")
    async def get_incident(incident_id: int) -> dict[str, Any]:
        d = await run(lambda: backend.get(f"/api/v1/incidents/{int(incident_id)}", {}))
        truncated = len(d.get("timeline", [])) > MAX_TIMELINE
        d["timeline"] = d.get("timeline", [])[-MAX_TIMELINE:]
        return {**_bounded(d, MAX_TIMELINE), "truncated": truncated}

    @server.tool(description="Counts, mean and p90 time to detect/recover/resolve, share "
                             "resolved by remediation, pages; by alertname, target or category.")
    async def incident_stats(since: str = "30d", until: str | None = None,
                             by: str = "alertname") -> dict[str, Any]:
        p = params(since=since, until=until, by=by)
        return _bounded(await run(lambda: backend.get("/api/v1/stats", p)))

    @server.tool(description="Each target's health now: up, probe, open incidents, last crash.")
    async def target_health() -> dict[str, Any]:
        return _bounded(await run(lambda: backend.get("/api/v1/targets", {})))

    @server.tool(description="Instant PromQL query over Sentinel's series (Prometheus format).")
    async def query(query: str, time: str | None = None) -> dict[str, Any]:
        p = params(query=query, time=time)
        return _bounded(await run(lambda: backend.get("/api/v1/query", p)))

    @server.tool(description="Silences (Alertmanager API v2 form), newest first.")
    async def list_silences() -> dict[str, Any]:
        items = await run(lambda: backend.get("/api/v2/silences", {}))
        return {"silences": _bounded(items), "truncated": len(items) > MAX_ROWS}

    @server.tool(description="Silence alerts matching every matcher (name=value, name=~re, …) "
                             "for a duration such as 2h. Needs a write token.")
    async def create_silence(matchers: list[str], comment: str,
                             duration: str = "1h") -> dict[str, Any]:
        body = silence_body(matchers, comment, duration)
        who = _principal.get()
        return await run(lambda: backend.write("POST", "/api/v2/silences", body, who))

    @server.tool(description="Parked actions awaiting approval (or of a given status).")
    async def list_approvals(status: str | None = None) -> dict[str, Any]:
        return _bounded(await run(lambda: backend.get("/api/v1/approvals", params(status=status))))

    @server.tool(description="Approve a parked action; it runs if still in time and the "
                             "incident is open. Needs a write token.")
    async def approve_action(approval_id: int) -> dict[str, Any]:
        who = _principal.get()
        return await run(lambda: backend.write(
            "POST", f"/api/v1/approvals/{int(approval_id)}/approve", None, who))

    @server.tool(description="Deny a parked action; on-call is paged. Needs a write token.")
    async def deny_action(approval_id: int) -> dict[str, Any]:
        who = _principal.get()
        return await run(lambda: backend.write(
            "POST", f"/api/v1/approvals/{int(approval_id)}/deny", None, who))

    @server.tool(description="Acknowledge an incident: someone has it, so its notifications "
                             "are not repeated or escalated. Needs a write token.")
    async def acknowledge_incident(incident_id: int) -> dict[str, Any]:
        who = _principal.get()
        return await run(lambda: backend.write(
            "POST", f"/api/v1/incidents/{int(incident_id)}/acknowledge", None, who))

    @server.tool(description="Add a note to an incident's timeline. Needs a write token.")
    async def add_incident_note(incident_id: int, text: str) -> dict[str, Any]:
        who = _principal.get()
        return await run(lambda: backend.write(
            "POST", f"/api/v1/incidents/{int(incident_id)}/notes", {"text": text}, who))

    return server


def silence_body(matchers: list[str], comment: str, duration: str) -> dict[str, Any]:
    """A PostableSilence from `name=value` matchers and a duration from now."""
    from datetime import UTC, datetime, timedelta

    from sentinel.config.durations import parse_duration
    from sentinel.respond.notify.matchers import parse_matcher

    parsed = [parse_matcher(m) for m in matchers]
    now = datetime.now(tz=UTC)
    return {"matchers": [{"name": m.name, "value": m.value, "isRegex": str(m.op) in ("=~", "!~"),
                          "isEqual": str(m.op) in ("=", "=~")} for m in parsed],
            "startsAt": now.isoformat(),
            "endsAt": (now + timedelta(milliseconds=parse_duration(duration))).isoformat(),
            "createdBy": "mcp", "comment": comment}


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class McpGate:
    """ASGI wrapper for /mcp: checks the token (write tools need a write token), then passes on."""

    def __init__(self, inner: Callable[[Scope, Receive, Send], Awaitable[None]],
                 auth: Auth) -> None:
        self.inner = inner
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > 1_000_000:
                await _json(send, 413, {"status": "error", "error": "body too large"})
                return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        try:
            p = self.auth.principal(headers.get("authorization"), None)
            self.auth.require_read(p)
            if scope.get("method") == "POST" and _calls_write_tool(body):
                self.auth.require_write(p)
        except ApiError as exc:
            await _json(send, exc.status, exc.body())
            return
        sent = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        token = _principal.set(p)
        try:
            await self.inner(scope, replay, send)
        finally:
            _principal.reset(token)


def _calls_write_tool(body: bytes) -> bool:
    try:
        msg = json.loads(body or b"null")
    except ValueError:
        return False
    for m in msg if isinstance(msg, list) else [msg]:
        if isinstance(m, dict) and m.get("method") == "tools/call" and isinstance(
                m.get("params"), dict) and m["params"].get("name") in WRITE_TOOLS:
            return True
    return False


async def _json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
