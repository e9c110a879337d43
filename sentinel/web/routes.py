"""Routes of the page: `/`, `/incidents/{id}`, `/targets`, `/stats`, `/silences`, login, assets.

Reading works without JavaScript and, on loopback, without a token. Acting
(approve, deny, silence; on an incident also acknowledge, owner, note and
re-run diagnosis) needs a write token entered once on /login, which
becomes a signed session cookie (HttpOnly, SameSite=Strict); every form
carries the session's CSRF value. Responses carry a Content-Security-Policy
that allows only Sentinel's own script and stylesheet.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlencode

import anyio.from_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from sentinel.api.acts import incident_matchers
from sentinel.api.auth import SESSION_COOKIE, SESSION_TTL_S, Auth, Principal
from sentinel.api.errors import ApiError
from sentinel.api.params import MAX_ID
from sentinel.api.routes import principal_of
from sentinel.api.service import ApiService
from sentinel.config.durations import parse_duration
from sentinel.respond.notify.matchers import parse_matcher
from sentinel.web import evidence_plot, pages

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                               "base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
STATIC = {"sentinel.css": "text/css; charset=utf-8",
          "live.js": "text/javascript; charset=utf-8"}
LIST_FILTERS = ("status", "alertname", "target", "category", "since", "until", "cursor")


def web_routes(service: ApiService, auth: Auth) -> list[BaseRoute]:
    """The page's routes."""
    def page(fn: Callable[[Request, Principal], tuple[str, dict[str, Any]] | Response],
             title: str = "", write: bool = False) -> Callable[[Request], Response]:
        def handle(request: Request) -> Response:
            cookie = request.cookies.get(SESSION_COOKIE)
            try:
                p = principal_of(request, auth)
                if write:
                    auth.require_write(p)
                    auth.check_csrf(cookie, _form(request).get("csrf"))
                else:
                    auth.require_read(p)
                out = fn(request, p)
            except ApiError as exc:
                return _html(pages.layout_page("error.html", "error", status=exc.status,
                                               message=exc.message), exc.status)
            if isinstance(out, Response):
                return out
            template, context = out
            name = p.name if p.via == "session" else ""
            return _html(pages.layout_page(template, title or "Sentinel", name,
                                           auth.csrf_for(cookie),
                                           scripts=request.url.path == "/", **context))
        return handle

    def index(request: Request, p: Principal) -> tuple[str, dict[str, Any]]:
        filters = {k: v for k, v in request.query_params.items() if k in LIST_FILTERS and v}
        listing = {k: v for k, v in filters.items() if k != "cursor"}
        open_filters = {**{k: v for k, v in listing.items() if k != "status"},
                        "status": "open", "limit": "100"}
        open_now = service.incidents(open_filters)
        # History below "Open now": without a status asked for, the incidents that are
        # over, so an open one is not listed twice (once with no duration).
        history = filters if "status" in filters else {**filters, "status": "resolved"}
        page_ = service.incidents(history)
        source = "/fragments/incidents?" + urlencode(history)
        return "incidents.html", {
            **pages.incident_list_context(open_now["incidents"], page_, listing, source),
            "open_source": "/fragments/incidents?" + urlencode(open_filters)}

    def rows(request: Request, p: Principal) -> Response:
        filters = {k: v for k, v in request.query_params.items() if k in LIST_FILTERS and v}
        return _html(pages.incident_rows(service.incidents(filters)["incidents"]))

    def incident(request: Request, p: Principal) -> tuple[str, dict[str, Any]]:
        d = service.incident(_int(request.path_params["id"]))
        recovered = [a["recovery_ms"] for a in d["actions"]
                     if a["status"] == "succeeded" and a["recovery_ms"] is not None]
        ev = service.evidence(d["incident"]["id"])
        return "incident.html", {"d": d, "ev": ev, "plots": evidence_plot.plot_views(ev),
                                 "can_write": p.can_write,
                                 "runbook": pages.runbook_text(d),
                                 "recovery_ms": recovered[0] if recovered else None,
                                 "silence_matchers": incident_matchers(d["incident"]),
                                 "can_diagnose": service.diagnosis_enabled,
                                 "links": d["links"]}

    def incident_act(fn: Callable[[int, dict[str, str], Principal], Any]
                     ) -> Callable[[Request, Principal], Response]:
        """A form of the incident page: do it (audited, on the timeline), then back there."""
        def run(request: Request, p: Principal) -> Response:
            iid = _int(request.path_params["id"])
            fn(iid, _form(request), p)
            return RedirectResponse(f"/incidents/{iid}#timeline", status_code=303)
        return run

    acts: dict[str, Callable[[int, dict[str, str], Principal], Any]] = {
        "acknowledge": lambda i, f, p: service.acknowledge(i, p, "page"),
        "owner": lambda i, f, p: service.assign(i, f.get("owner", ""), p, "page"),
        "notes": lambda i, f, p: service.add_note(i, f.get("text", ""), p, "page"),
        "silence": lambda i, f, p: service.silence_incident(i, {
            "matchers": f.get("matchers", ""), "duration": f.get("duration", ""),
            "comment": f.get("comment", "")}, p, "page"),
        "diagnose": lambda i, f, p: service.request_diagnosis(i, p, "page"),
    }

    def decide(approve: bool) -> Callable[[Request, Principal], Response]:
        def run(request: Request, p: Principal) -> Response:
            aid = _int(request.path_params["aid"])
            service.decide(aid, approve, p, "page")
            return RedirectResponse(f"/incidents/{_int(request.path_params['id'])}"
                                    f"#approval-{aid}", status_code=303)
        return run

    def silences(request: Request, p: Principal) -> tuple[str, dict[str, Any]]:
        return "silences.html", {"items": service.silences(), "can_write": p.can_write}

    def add_silence(request: Request, p: Principal) -> Response:
        form = _form(request)
        try:
            matchers = [parse_matcher(m) for m in form.get("matchers", "").split()]
            duration = parse_duration(form.get("duration") or "1h")
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        now = service.now_ms()
        service.create_silence({"matchers": [
            {"name": m.name, "value": m.value, "isRegex": str(m.op) in ("=~", "!~"),
             "isEqual": str(m.op) in ("=", "=~")} for m in matchers],
            "startsAt": _iso(now), "endsAt": _iso(now + duration),
            "comment": form.get("comment", "")}, p, "page")
        back = form.get("back", "")
        # Only back to an incident page of this site (no open redirect).
        target = back if re.fullmatch(r"/incidents/\d+", back) else "/silences"
        return RedirectResponse(target, status_code=303)

    def expire(request: Request, p: Principal) -> Response:
        service.expire_silence(str(request.path_params["sid"]), p, "page")
        return RedirectResponse("/silences", status_code=303)

    def stats(request: Request, p: Principal) -> tuple[str, dict[str, Any]]:
        now = service.now_ms()
        weekly = []
        for i in range(3, -1, -1):
            start, end = now - (i + 1) * 7 * 86_400_000, now - i * 7 * 86_400_000
            weekly.append((f"w-{i}" if i else "this week",
                           service.stats({"since": str(start / 1000), "until": str(end / 1000)})))
        return "stats.html", {**pages.stats_context(service.stats({}), weekly),
                              "verdicts": service.verdicts({}), "can_write": p.can_write}

    def promote(request: Request, p: Principal) -> Response:
        service.promote(str(request.path_params["policy"]), _int(request.path_params["step"]),
                        p, "page")
        return RedirectResponse("/stats#steps", status_code=303)

    def rule_filters(request: Request) -> tuple[dict[str, str], list[str], dict[str, str]]:
        state = request.query_params.get("state", "")
        label = request.query_params.get("label", "")
        shown = {"state": state, "label": label}
        return ({"state": state} if state else {}), ([label] if label else []), shown

    def alerts(request: Request, p: Principal) -> tuple[str, dict[str, Any]]:
        params, labels, shown = rule_filters(request)
        return "alerts.html", {"alerts": service.alerts(params, labels)["data"]["alerts"],
                               **shown}

    def rules(request: Request, p: Principal) -> tuple[str, dict[str, Any]]:
        params, labels, shown = rule_filters(request)
        return "rules.html", {"groups": service.rules(params, labels)["data"]["groups"],
                              **shown}

    return [
        Route("/", page(index, "Incidents")),
        Route("/alerts", page(alerts, "Alerts")),
        Route("/rules", page(rules, "Rules")),
        Route("/fragments/incidents", page(rows)),
        Route("/incidents/{id}", page(incident, "Incident")),
        Route("/incidents/{id}/approvals/{aid}/approve", page(decide(True), write=True),
              methods=["POST"]),
        Route("/incidents/{id}/approvals/{aid}/deny", page(decide(False), write=True),
              methods=["POST"]),
        *(Route(f"/incidents/{{id}}/{name}", page(incident_act(fn), write=True),
                methods=["POST"]) for name, fn in acts.items()),
        Route("/targets", page(lambda q, p: (
            "targets.html", {"targets": service.target_health()["targets"]}), "Targets")),
        Route("/stats", page(stats, "Stats")),
        Route("/stats/policies/{policy}/steps/{step}/promote", page(promote, write=True),
              methods=["POST"]),
        Route("/silences", page(silences, "Silences")),
        Route("/silences", page(add_silence, write=True), methods=["POST"]),
        Route("/silences/{sid}/expire", page(expire, write=True), methods=["POST"]),
        Route("/login", lambda q: _html(pages.layout_page("login.html", "log in",
                                                          no_tokens=not auth.has_tokens))),
        Route("/login", _login(auth), methods=["POST"]),
        Route("/logout", _logout(auth)),
        Route("/static/{name}", _static),
    ]


def _login(auth: Auth) -> Callable[[Request], Response]:
    def handle(request: Request) -> Response:
        token = _form(request).get("token", "")
        try:
            p = auth.check_token(token)
        except ApiError:
            time.sleep(0.2)  # a little friction for guessing through the form
            error = "no tokens are configured" if not auth.has_tokens else "unknown token"
            return _html(pages.layout_page("login.html", "log in", error=error,
                                           no_tokens=not auth.has_tokens), 401)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(SESSION_COOKIE, auth.new_session(p), max_age=SESSION_TTL_S,
                            httponly=True, samesite="strict", path="/")
        return response
    return handle


def _logout(auth: Auth) -> Callable[[Request], Response]:
    def handle(request: Request) -> Response:
        # Deleting the cookie is not enough: a copy of it would stay valid until it expires.
        auth.revoke(request.cookies.get(SESSION_COOKIE))
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response
    return handle


def _static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return Response("not found\n", status_code=404, media_type="text/plain")
    body = resources.files("sentinel.web").joinpath("static", name).read_bytes()
    return Response(body, media_type=STATIC[name],
                    headers={**SECURITY_HEADERS, "Cache-Control": "max-age=300"})




def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()


def _form(request: Request) -> dict[str, str]:
    cached = request.scope.get("sentinel.form")
    if cached is None:
        body = anyio.from_thread.run(request.body)
        cached = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        request.scope["sentinel.form"] = cached
    return cached  # type: ignore[no-any-return]


def _int(raw: Any) -> int:
    text = str(raw)
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_ID:
        raise ApiError(404, "not found")
    return int(text)


def _html(body: str, status: int = 200) -> Response:
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)
