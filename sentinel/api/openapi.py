"""The OpenAPI 3.1 document served at /api/v1/openapi.json.

Written by hand, kept true by tests/test_api_openapi.py: every route the
server has is documented and every documented path is served; the query
parameters of each GET are exactly those the handler accepts; and real
responses validate against the schemas below.
"""

from __future__ import annotations

from typing import Any

from sentinel.api.annotations import PARAMS as ANNOTATION_PARAMS
from sentinel.api.history import FILTERS
from sentinel.api.stats import PARAMS as STATS_PARAMS

_TIME = {"type": "string", "description": "RFC 3339, epoch seconds, or a duration back from "
         "now such as 30d"}
_NULLABLE_STR = {"type": ["string", "null"]}
_SUMMARY = {"type": "object", "required": ["n", "mean", "p50", "p90"], "properties": {
    "n": {"type": "integer"}, "mean": {"type": ["number", "null"]},
    "p50": {"type": ["number", "null"]},
    "p90": {"type": ["number", "null"]}}}
_GROUP = {"type": "object", "required": [
    "count", "open", "resolved", "time_to_detect_ms", "time_to_recovery_ms",
    "time_to_resolve_ms", "resolved_by_remediation", "resolved_by_itself", "pages_sent"],
    "properties": {"count": {"type": "integer"}, "time_to_detect_ms": _SUMMARY,
                   "time_to_recovery_ms": _SUMMARY, "time_to_resolve_ms": _SUMMARY,
                   "pages_sent": {"type": "integer"}}}
SCHEMAS: dict[str, Any] = {
    "Annotations": {"type": "array", "items": {"type": "object", "required": [
        "id", "time", "timeEnd", "title", "text", "tags"], "properties": {
        "id": {"type": "integer"}, "time": {"type": "integer"}, "timeEnd": {"type": "integer"},
        "title": {"type": "string"}, "text": {"type": "string"}, "tags": {"type": "string"}}}},
    "Error": {"type": "object", "required": ["status", "error"], "properties": {
        "status": {"const": "error"}, "error": {"type": "string"},
        "param": {"type": "string"}}},
    "IncidentSummary": {"type": "object", "required": [
        "id", "alertname", "target", "status", "severity", "summary", "category",
        "opened_at", "resolved_at", "updated_at", "alerts", "firing"], "properties": {
        "id": {"type": "integer"}, "alertname": {"type": "string"},
        "target": {"type": "string"}, "status": {"enum": ["open", "resolved"]},
        "category": _NULLABLE_STR, "opened_at": {"type": "string"},
        "resolved_at": _NULLABLE_STR, "alerts": {"type": "integer"},
        "firing": {"type": "integer"},
        # Who was told (issue 48): the list's one-line marker, null when nothing yet.
        "told": {"type": ["object", "null"], "required": ["text", "at", "told"]}}},
    "IncidentPage": {"type": "object", "required": ["incidents", "next_cursor"], "properties": {
        "incidents": {"type": "array", "items": {"$ref": "#/components/schemas/IncidentSummary"}},
        "next_cursor": _NULLABLE_STR}},
    "IncidentDetail": {"type": "object", "required": [
        "incident", "alerts", "timeline", "runbooks", "log_excerpts", "actions", "decisions",
        "approvals", "notifications", "told"], "properties": {
        "incident": {"$ref": "#/components/schemas/IncidentSummary"},
        "told": {"type": "object", "required": ["told", "not_told", "marker"], "properties": {
            "told": {"type": "array", "items": {
                "type": "object", "required": ["receiver", "got"]}},
            "not_told": {"type": "array", "items": {"type": "object", "required": [
                "receiver", "reason", "detail", "at", "ended_at"]}}}},
        "alerts": {"type": "array"}, "timeline": {"type": "array", "items": {
            "type": "object", "required": ["id", "at", "kind", "message", "data"]}},
        "actions": {"type": "array"}, "approvals": {"type": "array"},
        "notifications": {"type": "array"}}},
    "IncidentEvidence": {"type": "object", "required": [
        "incident_id", "source", "stored", "window", "view", "step_ms", "plots", "marks"],
        "properties": {
            "source": {"enum": ["stored", "stored+live", "live", "none"]},
            "plots": {"type": "array", "items": {"type": "object", "required": [
                "kind", "title", "expr", "plotted", "threshold", "series"], "properties": {
                "kind": {"enum": ["rule", "evidence"]},
                "series": {"type": "array", "items": {
                    "type": "object", "required": ["labels", "points"]}}}}},
            "marks": {"type": "array", "items": {
                "type": "object", "required": ["at", "at_ms", "kind", "label"]}}}},
    "Stats": {"type": "object", "required": ["since", "until", "by", "total", "groups"],
              "properties": {"total": _GROUP, "groups": {"type": "array", "items": {
                  "allOf": [_GROUP, {"type": "object", "required": ["key"]}]}}}},
    "Targets": {"type": "object", "required": ["targets"], "properties": {"targets": {
        "type": "array", "items": {"type": "object", "required": [
            "name", "source", "address", "up", "probe_success", "log_sources", "open_incidents",
            "last_crash"]}}}},
    "Alerts": {"type": "object", "required": ["status", "data"], "properties": {
        "status": {"const": "success"}, "data": {"type": "object", "required": ["alerts"],
                                                 "properties": {"alerts": {"type": "array"}}}}},
    "Rules": {"type": "object", "required": ["status", "data"], "properties": {
        "status": {"const": "success"}, "data": {"type": "object", "required": ["groups"],
                                                 "properties": {"groups": {"type": "array"}}}}},
    "QueryResult": {"type": "object", "required": ["status"], "properties": {
        "status": {"enum": ["success", "error"]}, "data": {
            "type": "object", "required": ["resultType", "result"]}}},
    "Approval": {"type": "object", "required": [
        "id", "incident_id", "target", "policy", "step", "action", "plan", "status",
        "requested_at", "expires_at", "decided_at", "decided_by", "attempt_id"]},
    "Approvals": {"type": "object", "required": ["approvals"], "properties": {"approvals": {
        "type": "array", "items": {"$ref": "#/components/schemas/Approval"}}}},
    "Decision": {"type": "object", "required": ["approval", "changed", "status", "message"]},
    "Verdicts": {"type": "object", "required": ["since", "until", "by_policy", "steps"],
                 "properties": {"by_policy": {"type": "array"}, "steps": {"type": "array"}}},
    "Promotion": {"type": "object", "required": ["policy", "step", "promoted"]},
    "Act": {"type": "object", "required": ["incident", "changed", "message"], "properties": {
        "incident": {"type": "integer"}, "changed": {"type": "boolean"},
        "message": {"type": "string"}}},
    "Owner": {"type": "object", "required": ["owner"], "properties": {
        "owner": {"type": "string"}}},
    "Note": {"type": "object", "required": ["text"], "properties": {
        "text": {"type": "string", "maxLength": 4000}}},
    "IncidentSilenceRequest": {"type": "object", "required": ["comment"], "properties": {
        "matchers": {"description": 'text such as target="tpu-a" alertname=~"X.*", or API '
                     "v2 matcher objects"},
        "duration": {"type": "string", "description": "default 1h"},
        "comment": {"type": "string"}}},
    "IncidentSilence": {"type": "object", "required": ["incident", "silenceID"]},
    "GettableSilence": {"type": "object", "required": [
        "id", "status", "updatedAt", "matchers", "startsAt", "endsAt", "createdBy", "comment"]},
    "PostableSilence": {"type": "object", "required": [
        "matchers", "startsAt", "endsAt", "createdBy", "comment"]},
}

_DESCRIPTIONS = {
    "status": "open or resolved", "state": "inactive, pending or firing",
    "label": "a label matcher such as target=\"tpu-a\" (repeatable; all must match)",
    "alertname": "exact alert name", "target": "exact target",
    "category": "the alert's category label (hbm_oom, …)", "since": "opened at or after",
    "until": "opened before", "limit": "1–500, default 50",
    "cursor": "next_cursor of the previous page", "by": "alertname, target or category",
    "query": "PromQL expression", "time": "evaluation time (default now)",
    "from": "epoch ms (Grafana's ${__from}); default to - 6h",
    "to": "epoch ms (Grafana's ${__to}); default now",
}


ALERT_PARAMS = ("filter", "active", "silenced", "inhibited", "unprocessed", "receiver")
_DESCRIPTIONS.update({
    "filter": 'a label matcher such as alertname="X" (repeatable)',
    "active": "include active alerts (default true)",
    "silenced": "include silenced alerts (default true)",
    "inhibited": "include inhibited alerts (default true)",
    "unprocessed": "include unprocessed alerts (default true; Sentinel has none)",
    "receiver": "a regex (fully anchored) over receiver names",
})


def _params(names: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{"name": n, "in": "query", "required": n == "query",
             "description": _DESCRIPTIONS.get(n, ""),
             "schema": _TIME if n in ("since", "until", "time") else {"type": "string"}}
            for n in names]


def _op(summary: str, schema: str | None, params: tuple[str, ...] = (), *, write: bool = False,
        body: str | None = None, path_id: bool = False, path: tuple[str, ...] = ()
        ) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "parameters": _params(params)}
    for name in (("id",) if path_id else ()) + path:
        op["parameters"].append({"name": name, "in": "path", "required": True,
                                 "schema": {"type": "string"}})
    ok: dict[str, Any] = {"description": "OK"}
    if schema is not None:
        ok["content"] = {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}
    err = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    op["responses"] = {"200": ok, "400": {"description": "bad parameter", **err}}
    if write:
        op["security"] = [{"bearer": []}]
        op["responses"]["401"] = {"description": "no or unknown token", **err}
        op["responses"]["403"] = {"description": "read-only token", **err}
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{body}"}}}}
    return op


def openapi_document() -> dict[str, Any]:
    """The whole document."""
    paths = {
        "/api/v1/incidents": {"get": _op("Incidents, newest first (keyset pages)",
                                         "IncidentPage", FILTERS)},
        "/api/v1/incidents/{id}": {"get": _op("One incident in full", "IncidentDetail",
                                              path_id=True)},
        "/api/v1/incidents/{id}/acknowledge": {"post": _op(
            "Acknowledge: no more repeats or escalations of this incident", "Act", write=True,
            path_id=True)},
        "/api/v1/incidents/{id}/owner": {"post": _op(
            'Set the owner ({"owner": "name"}; "" removes it)', "Act", write=True,
            path_id=True, body="Owner")},
        "/api/v1/incidents/{id}/notes": {"post": _op(
            'Add a note to the timeline ({"text": "..."})', "Act", write=True, path_id=True,
            body="Note")},
        "/api/v1/incidents/{id}/silence": {"post": _op(
            "Silence the incident's alerts (default matchers: its alertname and target)",
            "IncidentSilence", write=True, path_id=True, body="IncidentSilenceRequest")},
        "/api/v1/incidents/{id}/diagnose": {"post": _op(
            "Run the model diagnosis again (409 when diagnosis is not configured)", "Act",
            write=True, path_id=True)},
        "/api/v1/incidents/{id}/evidence": {"get": _op(
            "The incident's plotted series (stored with it, plus the live tail), threshold "
            "and marks", "IncidentEvidence", path_id=True)},
        "/api/v1/stats": {"get": _op("Counts and times to detect, recover, resolve", "Stats",
                                     STATS_PARAMS)},
        "/api/v1/targets": {"get": _op("Each target's health now", "Targets")},
        "/api/v1/annotations": {"get": _op(
            "Incidents overlapping [from, to] (epoch ms) as Grafana annotations (Infinity "
            "data source): a JSON array of time, timeEnd, title, text, tags", "Annotations",
            ANNOTATION_PARAMS)},
        "/api/v1/alerts": {"get": _op("Pending and firing alerts with their `for` progress "
                                      "(Prometheus's shape)", "Alerts", ("state", "label"))},
        "/api/v1/rules": {"get": _op("Every rule with its state, health, last evaluation and "
                                     "error (Prometheus's shape)", "Rules", ("state", "label"))},
        "/api/v1/query": {"get": _op("Instant PromQL query (Prometheus's format)",
                                     "QueryResult", ("query", "time")),
                          "post": _op("Instant PromQL query (form-encoded)", "QueryResult",
                                      ("query", "time"))},
        "/api/v1/approvals": {"get": _op("Parked actions and their decisions", "Approvals",
                                         ("status",))},
        "/api/v1/approvals/{id}/approve": {"post": _op("Approve a parked action", "Decision",
                                                       write=True, path_id=True)},
        "/api/v1/approvals/{id}/deny": {"post": _op("Deny a parked action", "Decision",
                                                    write=True, path_id=True)},
        "/api/v1/remediation/verdicts": {"get": _op(
            "Remediation verdicts (fixed, recurred, failed, overridden) per policy and action "
            "over a window, and the demoted policy steps", "Verdicts", ("since", "until"))},
        "/api/v1/remediation/policies/{policy}/steps/{step}/promote": {"post": _op(
            "Promote a demoted policy step (1-based) back to acting without approval (409 "
            "when it is not demoted)", "Promotion", write=True, path=("policy", "step"))},
        "/api/v1/openapi.json": {"get": _op("This document", None)},
        "/api/v2/silences": {
            "get": _op("Silences (Alertmanager API v2)", None),
            "post": _op("Create or replace a silence", None, write=True,
                        body="PostableSilence")},
        "/api/v2/silence/{id}": {
            "get": _op("One silence", "GettableSilence", path_id=True),
            "delete": _op("Expire a silence", None, write=True, path_id=True)},
        "/api/v2/status": {"get": _op("Alertmanager-style status (for amtool)", None)},
        # Shapes as in Alertmanager's own spec (gettableAlerts, alertGroups).
        "/api/v2/alerts": {"get": _op("Alerts firing in open incidents (Alertmanager API v2)",
                                      None, ALERT_PARAMS)},
        "/api/v2/alerts/groups": {"get": _op("Those alerts grouped as the routes group them",
                                             None, ALERT_PARAMS)},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Sentinel API", "version": "1"},
        "paths": paths,
        "components": {"schemas": SCHEMAS, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"}}},
    }
