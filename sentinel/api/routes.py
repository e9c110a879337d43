"""HTTP routes of the JSON API (`/api/v1`) and Alertmanager's API v2 (silences, alerts).

Handlers are plain `def` functions (Starlette runs them in its thread pool),
since the database calls are blocking. Every error is JSON with a message, and
the parameter's name when one is at fault.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from sentinel.api.auth import SESSION_COOKIE, Auth, Principal
from sentinel.api.errors import ApiError
from sentinel.api.openapi import openapi_document
from sentinel.api.params import parse_id
from sentinel.api.service import ApiService

log = logging.getLogger(__name__)
MAX_BODY = 64 * 1024


def principal_of(request: Request, auth: Auth) -> Principal:
    """Who asks (bearer header, else the page's session cookie, else anonymous)."""
    return auth.principal(request.headers.get("authorization"),
                          request.cookies.get(SESSION_COOKIE))


def json_error(exc: ApiError) -> JSONResponse:
    """The JSON body of an ApiError, with WWW-Authenticate on 401."""
    headers = {"WWW-Authenticate": 'Bearer realm="sentinel"'} if exc.status == 401 else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


def _endpoint(auth: Auth, write: bool, fn: Callable[[Request, Principal], Any]
              ) -> Callable[[Request], Response]:
    def handle(request: Request) -> Response:
        try:
            p = principal_of(request, auth)
            if write:
                auth.require_write(p)
                if p.via == "session":  # a browser form or fetch: ambient credentials
                    auth.check_csrf(request.cookies.get(SESSION_COOKIE),
                                    request.headers.get("x-csrf-token"))
            else:
                auth.require_read(p)
            result = fn(request, p)
        except ApiError as exc:
            return json_error(exc)
        if isinstance(result, Response):
            return result
        status = 200
        if isinstance(result, dict) and "_http_status" in result:
            status = int(result.pop("_http_status"))
        return JSONResponse(result, status_code=status)
    return handle


def _id(request: Request, name: str = "id") -> int:
    return parse_id(str(request.path_params[name]), name)


def _form_params(request: Request) -> dict[str, str]:
    import anyio.from_thread

    body = anyio.from_thread.run(request.body)
    if len(body) > MAX_BODY:
        raise ApiError(413, f"body larger than {MAX_BODY} bytes")
    try:
        return dict(parse_qsl(body.decode(), keep_blank_values=True))
    except (UnicodeDecodeError, ValueError):
        raise ApiError(400, "body is not a URL-encoded form") from None


def _body_json(request: Request) -> Any:
    import anyio.from_thread

    body = anyio.from_thread.run(request.body)
    if len(body) > MAX_BODY:
        raise ApiError(413, "body too large")
    try:
        return json.loads(body or b"null")
    except ValueError:
        raise ApiError(400, "body is not JSON") from None


def _field(request: Request, name: str, blank: bool = False) -> str:
    """One string field of a JSON object body."""
    body = _body_json(request)
    value = body.get(name) if isinstance(body, dict) else None
    if not isinstance(value, str) or not (blank or value.strip()):
        raise ApiError(400, f"body needs a string {name!r}", name)
    return value


def api_routes(service: ApiService, auth: Auth) -> list[BaseRoute]:
    """The /api/v1 and /api/v2 routes."""
    def r(path: str, fn: Callable[[Request, Principal], Any], methods: tuple[str, ...] = ("GET",),
          write: bool = False) -> Route:
        return Route(path, _endpoint(auth, write, fn), methods=list(methods))

    def params(request: Request) -> dict[str, str]:
        out = dict(request.query_params)
        if request.method == "POST" and request.headers.get("content-type", "").startswith(
                "application/x-www-form-urlencoded"):
            out.update(_form_params(request))  # as Prometheus: a long query goes in the body
        return out

    return [
        r("/api/v1/incidents", lambda q, p: service.incidents(params(q))),
        r("/api/v1/incidents/{id}", lambda q, p: service.incident(_id(q))),
        # What people do to an incident (issue 37): each a write, audited, on the timeline.
        r("/api/v1/incidents/{id}/acknowledge",
          lambda q, p: service.acknowledge(_id(q), p, "api"), ("POST",), write=True),
        r("/api/v1/incidents/{id}/owner", lambda q, p: service.assign(
            _id(q), _field(q, "owner", blank=True), p, "api"), ("POST",), write=True),
        r("/api/v1/incidents/{id}/notes", lambda q, p: service.add_note(
            _id(q), _field(q, "text", blank=True), p, "api"), ("POST",), write=True),
        r("/api/v1/incidents/{id}/silence", lambda q, p: service.silence_incident(
            _id(q), _body_json(q), p, "api"), ("POST",), write=True),
        r("/api/v1/incidents/{id}/diagnose",
          lambda q, p: service.request_diagnosis(_id(q), p, "api"), ("POST",), write=True),
        r("/api/v1/incidents/{id}/evidence", lambda q, p: service.evidence(_id(q))),
        r("/api/v1/stats", lambda q, p: service.stats(params(q))),
        # Incidents as Grafana annotations (Infinity data source): a JSON array.
        r("/api/v1/annotations", lambda q, p: JSONResponse(service.annotations(params(q)))),
        r("/api/v1/targets", lambda q, p: service.target_health()),
        r("/api/v1/alerts", lambda q, p: service.alerts(
            params(q), q.query_params.getlist("label"))),
        r("/api/v1/rules", lambda q, p: service.rules(
            params(q), q.query_params.getlist("label"))),
        r("/api/v1/query", lambda q, p: service.query(params(q)), ("GET", "POST")),
        r("/api/v1/approvals", lambda q, p: service.approvals(q.query_params.get("status"))),
        r("/api/v1/approvals/{id}/approve",
          lambda q, p: service.decide(_id(q), True, p, "api"), ("POST",), write=True),
        r("/api/v1/approvals/{id}/deny",
          lambda q, p: service.decide(_id(q), False, p, "api"), ("POST",), write=True),
        r("/api/v1/remediation/verdicts", lambda q, p: service.verdicts(params(q))),
        r("/api/v1/remediation/policies/{policy}/steps/{step}/promote",
          lambda q, p: service.promote(q.path_params["policy"], _id(q, "step"), p, "api"),
          ("POST",), write=True),
        r("/api/v1/openapi.json", lambda q, p: openapi_document()),
        r("/api/v2/silences", lambda q, p: service.silences()),
        r("/api/v2/silences",
          lambda q, p: service.create_silence(_body_json(q), p, "api"), ("POST",), write=True),
        r("/api/v2/silence/{id}", lambda q, p: service.silence(q.path_params["id"])),
        r("/api/v2/silence/{id}",
          lambda q, p: _expire(service, q.path_params["id"], p), ("DELETE",), write=True),
        r("/api/v2/status", lambda q, p: _status(service)),
        r("/api/v2/alerts", lambda q, p: _alerts_v2(service, q, grouped=False)),
        r("/api/v2/alerts/groups", lambda q, p: _alerts_v2(service, q, grouped=True)),
    ]


def _all_params(request: Request) -> tuple[dict[str, str], list[str]]:
    """URL and (POST) form parameters, and every `match[]` of both, as Prometheus reads them."""
    pairs = list(request.query_params.multi_items())
    if request.method == "POST" and request.headers.get("content-type", "").startswith(
            "application/x-www-form-urlencoded"):
        import anyio.from_thread

        body = anyio.from_thread.run(request.body)
        if len(body) > MAX_BODY:
            raise ApiError(413, f"body larger than {MAX_BODY} bytes")
        try:
            pairs += parse_qsl(body.decode(), keep_blank_values=True)
        except (UnicodeDecodeError, ValueError):
            raise ApiError(400, "body is not a URL-encoded form") from None
    return dict(pairs), [v for k, v in pairs if k == "match[]"]


def data_source_routes(service: ApiService, auth: Auth) -> list[BaseRoute]:
    """Prometheus's read API beyond instant queries, for Grafana and promtool
    (sentinel/api/datasource.py); reads, with /api/v1/query's auth and limits."""
    from sentinel.api.datasource import DataSource
    from sentinel.api.federate import CONTENT_TYPE

    source = DataSource(service)
    both = ("GET", "POST")

    def r(path: str, fn: Callable[[Request], Any], methods: tuple[str, ...] = ("GET",)
          ) -> Route:
        return Route(path, _endpoint(auth, False, lambda q, p: fn(q)), methods=list(methods))

    def with_matches(fn: Callable[[dict[str, str], list[str]], Any]) -> Callable[[Request], Any]:
        return lambda q: fn(*_all_params(q))

    def federate(q: Request) -> Response:
        return Response(source.federate(q.query_params.getlist("match[]")),
                        media_type=CONTENT_TYPE)

    return [
        r("/api/v1/query_range", lambda q: source.query_range(_all_params(q)[0]), both),
        r("/api/v1/series", with_matches(source.series), both),
        r("/api/v1/labels", with_matches(source.labels), both),
        r("/api/v1/label/{name}/values", lambda q: source.label_values(
            str(q.path_params["name"]), *_all_params(q))),
        r("/api/v1/metadata", lambda q: source.metadata(_all_params(q)[0])),
        r("/api/v1/status/buildinfo", lambda q: source.buildinfo()),
        r("/api/v1/query_exemplars", lambda q: source.exemplars(_all_params(q)[0]), both),
        r("/federate", federate),
    ]


def reload_route(auth: Auth, reload: Callable[[], Any]) -> Route:
    """POST /-/reload, as Prometheus's: the whole configuration, with a write token.

    200 and `{"status": "success"}` when applied; 500 and the refusal (file, line,
    key) when the running configuration stays, so `curl -f` fails as it does there.
    """
    def run(request: Request, p: Principal) -> dict[str, Any]:
        log.info("configuration reload asked by %s (%s)", p.name, p.via)
        result = reload()
        if result:
            return {"status": "success", "message": result.message}
        return {"status": "error", "error": result.message, "_http_status": 500}
    return Route("/-/reload", _endpoint(auth, True, run), methods=["POST", "PUT"])


def _alerts_v2(service: ApiService, request: Request, grouped: bool) -> Response:
    """Alertmanager's alert reads; a JSON array (the generic handler returns objects)."""
    alerts = service.alerts_v2(request.query_params.getlist("filter"),
                               dict(request.query_params), grouped=grouped)
    return JSONResponse(alerts)


def _expire(service: ApiService, sid: str, p: Principal) -> Response:
    service.expire_silence(sid, p, "api")
    return Response(status_code=200)


def _status(service: ApiService) -> dict[str, Any]:
    """Alertmanager's status, without `versionInfo`: amtool compares its major.minor with
    its own and warned on every call ("amtool version (0.25.0) and alertmanager version
    (sentinel) are different"); without it amtool goes on silently, as its code says.
    Sentinel's own build is under `sentinel`."""
    from datetime import UTC, datetime

    from sentinel.buildinfo import build_info

    return {"cluster": {"status": "ready", "peers": [], "name": "sentinel"},
            "sentinel": {k: build_info()[k] for k in ("version", "commit")},
            "config": {"original": ""},
            "uptime": datetime.fromtimestamp(service.started_ms / 1000, tz=UTC).isoformat()}
