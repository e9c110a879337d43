"""The API's operations as plain methods returning JSON-ready dicts.

The HTTP routes, the page and the MCP tools all call these, so every surface
answers with the same data. Writes take the `Principal` that asks and are
audited (token name, when, what, outcome) in `api_audit`; authorisation
itself is checked by the caller (routes, MCP), which knows how the request came.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select

from sentinel.api import acts, history, rules_view, stats, verdicts_view
from sentinel.api.auth import Principal
from sentinel.api.errors import ApiError, bad_param
from sentinel.api.params import time_param
from sentinel.api.querypool import QueryPool
from sentinel.incidents import operator
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, LogEventRow
from sentinel.incidents.models_api import ApiAudit, ApprovalStatus
from sentinel.incidents.series_capture import CaptureSettings
from sentinel.model import InstantSample
from sentinel.promql import PromQLError
from sentinel.promql.compile import check_expr_text
from sentinel.promql.floatops import format_float
from sentinel.promql.limits import QueryLimitError

MAX_QUERY_RESULT = 10_000  # series in one instant query result
MAX_SILENCE_BYTES = 64 * 1024  # a silence, comment included, as the API's body limit


@dataclass
class ApiService:
    """What the API reads and writes: the database, the series store, the approval runner."""

    db: Database
    query_fn: Callable[[str, int], Any] | None = None  # Engine.query(expr, at_ms)
    targets: Sequence[str] = ()
    rule_exprs: Callable[[str], str | None] = lambda _alertname: None
    on_approved: Callable[[], None] = lambda: None
    # Re-run diagnosis from the page/API: the daemon's diagnosis job, woken at once.
    on_diagnosis_requested: Callable[[], None] = lambda: None
    diagnosis_enabled: bool = False
    web: Any = None  # sentinel.config.web.WebConfig: links out from an incident
    clock: Callable[[], float] = time.time
    # The live rule manager (None before start) and the loaded rule groups: alerts, rules.
    rule_manager: Callable[[], Any] = lambda: None
    # Targets found by discovery now (TargetConfig-like: name, url), and each log source's
    # last poll ({target: {source: 1.0 or 0.0}}).
    discovered: Callable[[], Sequence[Any]] = lambda: ()
    log_sources: Callable[[], Mapping[str, Mapping[str, float]]] = lambda: {}
    rule_groups: Callable[[], Sequence[Any]] = lambda: ()
    external_url: str = ""
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    # Routing tree and inhibition rules for API v2's alerts (receivers, inhibitedBy).
    alert_routing: Any = None  # sentinel.api.alerts_v2.AlertRouting
    pool: QueryPool | None = None  # where clients' queries run (api/querypool.py)
    # The stored window of incidents' series (config `evidence:`), for the live tail.
    evidence_settings: CaptureSettings = field(default_factory=CaptureSettings)
    # The oldest time the query backend still holds at `now` (the store's retention).
    earliest_ms: Callable[[int], int | None] = lambda _now: None

    def __post_init__(self) -> None:
        if self.pool is None:
            self.pool = _pool_for(self.query_fn)

    def now_ms(self) -> int:
        """The service's clock in ms."""
        return int(self.clock() * 1000)

    # -- reads -----------------------------------------------------------------------

    def incidents(self, params: Mapping[str, str]) -> dict[str, Any]:
        """GET /api/v1/incidents."""
        return history.list_incidents(self.db, params, self.now_ms())

    def incident(self, incident_id: int) -> dict[str, Any]:
        """GET /api/v1/incidents/{id}, with its links out (dashboard, graph, runbook)."""
        from sentinel.api.links import incident_links

        d = history.get_incident(self.db, incident_id)
        window = history.incident_window_ms(d, self.now_ms())
        d["links"] = incident_links(self.web, d, self.rule_exprs(d["incident"]["alertname"]),
                                    window)
        return d

    def evidence(self, incident_id: int) -> dict[str, Any]:
        """GET /api/v1/incidents/{id}/evidence: the stored series, plus the live tail."""
        from sentinel.api.evidence import incident_evidence

        now = self.now_ms()
        return incident_evidence(self.db, incident_id, self.rule_exprs, self.evidence_settings,
                                 now, self._live_series(), self.earliest_ms(now))

    def _live_series(self) -> Any:
        """Captures from the live backend, in the query pool (a child for the store)."""
        from sentinel.incidents.series_recorder import extend

        query_fn, pool = self.query_fn, self.pool
        if query_fn is None or pool is None:
            return None

        def live(spec: Any, stored: Any, start: int, end: int, settings: CaptureSettings
                 ) -> Any:
            return pool.run(lambda: extend(query_fn, spec, stored, start, end, settings))
        return live

    def annotations(self, params: Mapping[str, str]) -> list[dict[str, Any]]:
        """GET /api/v1/annotations: incidents overlapping from..to, for Grafana (Infinity)."""
        from sentinel.api.annotations import incident_annotations

        return incident_annotations(self.db, params, self.now_ms())

    def stats(self, params: Mapping[str, str]) -> dict[str, Any]:
        """GET /api/v1/stats."""
        return stats.stats(self.db, params, self.now_ms())

    def target_health(self) -> dict[str, Any]:
        """GET /api/v1/targets: static and discovered targets with scrape (up), probe and
        log-source health, open incidents and last crash."""
        now = self.now_ms()
        listed: list[tuple[str, str, str | None]] = [(n, "static", None) for n in self.targets]
        seen = set(self.targets)
        for t in self.discovered():
            if t.name not in seen:
                seen.add(t.name)
                listed.append((t.name, "kubernetes", str(t.url)))
        up = self._gauge("up", now)
        probe = self._gauge("sentinel_probe_success", now)
        ttft = self._gauge("sentinel_probe_ttft_seconds", now)
        logs = self.log_sources()
        with self.db.session() as s:
            open_counts = dict(s.execute(select(Incident.target, func.count()).where(
                Incident.status == "open").group_by(Incident.target)).all())
            crashes: dict[str, Any] = {}
            for name, _, _ in listed:
                row = s.scalars(select(LogEventRow).where(LogEventRow.target == name)
                                .order_by(LogEventRow.at.desc(), LogEventRow.id.desc())
                                .limit(1)).first()
                if row is not None:
                    crashes[name] = {"at": history.iso(row.at), "signature": row.signature,
                                     "category": row.category, "severity": row.severity}
        return {"targets": [{
            "name": name, "source": source, "address": address, "up": up.get(name),
            "probe_success": probe.get(name), "probe_ttft_seconds": ttft.get(name),
            "log_sources": dict(logs.get(name, {})),
            "open_incidents": open_counts.get(name, 0),
            "last_crash": crashes.get(name)} for name, source, address in listed]}

    def alerts(self, params: Mapping[str, str], labels: Sequence[str] = ()) -> dict[str, Any]:
        """GET /api/v1/alerts: pending and firing alerts with their `for` progress."""
        state, matchers = rules_view.filters(params, labels)
        return {"status": "success", "data": rules_view.alerts_data(
            self.rule_manager(), self.rule_groups(), self.now_ms(), state, matchers)}

    def rules(self, params: Mapping[str, str], labels: Sequence[str] = ()) -> dict[str, Any]:
        """GET /api/v1/rules: every rule with its state, health, last evaluation and error."""
        state, matchers = rules_view.filters(params, labels)
        return {"status": "success", "data": rules_view.rules_data(
            self.rule_manager(), self.rule_groups(), self.now_ms(), state, matchers)}

    def _gauge(self, metric: str, now: int) -> dict[str, float]:
        if self.query_fn is None:
            return {}
        try:
            result = self.query_fn(metric, now)
        except PromQLError:
            return {}
        out: dict[str, float] = {}
        for sample in result if isinstance(result, list) else ():
            target = dict(sample.labels).get("target")
            if target is not None and not math.isnan(sample.value):
                out[target] = sample.value
        return out

    def query(self, params: Mapping[str, str]) -> dict[str, Any]:
        """GET /api/v1/query: an instant query, answered in Prometheus's response format."""
        expr = params.get("query")
        if not expr:
            raise ApiError(400, "bad parameter 'query': required", "query")
        at = time_param(params, "time", self.now_ms())
        at = self.now_ms() if at is None else at
        query_fn = self.query_fn
        if query_fn is None:
            raise ApiError(503, "no series store in this process (ask the daemon)")
        assert self.pool is not None
        try:
            check_expr_text(expr)  # microseconds, here: no child for what the text refuses
            result = self.pool.run(lambda: _capped(query_fn(expr, at)))
        except QueryLimitError as exc:
            return {"status": "error", "errorType": "execution", "error": str(exc),
                    "limit": exc.limit, "_http_status": 422}
        except PromQLError as exc:
            return {"status": "error", "errorType": "bad_data", "error": str(exc),
                    "_http_status": 400}
        ts = at / 1000
        if isinstance(result, list):
            samples: list[InstantSample] = result[:MAX_QUERY_RESULT]
            return {"status": "success", "data": {"resultType": "vector", "result": [
                {"metric": dict(s.labels), "value": [ts, format_float(s.value)]}
                for s in samples]}}
        return {"status": "success",
                "data": {"resultType": "scalar", "result": [ts, format_float(float(result))]}}

    # -- approvals --------------------------------------------------------------------

    def approvals(self, status: str | None = None) -> dict[str, Any]:
        """GET /api/v1/approvals."""
        from sentinel.respond.remediate import approvals

        if status is not None and status not in tuple(ApprovalStatus):
            raise bad_param("status", f"must be one of {', '.join(ApprovalStatus)}")
        return {"approvals": [history.approval_view(a)
                              for a in approvals.listing(self.db, status)]}

    def decide(self, approval_id: int, approve: bool, who: Principal, via: str
               ) -> dict[str, Any]:
        """POST /api/v1/approvals/{id}/approve|deny (audited)."""
        from sentinel.respond.remediate import approvals

        verb = "approve" if approve else "deny"
        try:
            d = approvals.decide(self.db, approval_id, approve, who.name, self.now_ms())
        except LookupError:
            self.audit(who, via, f"{verb} approval {approval_id}", 404, "no such approval")
            raise ApiError(404, f"no approval {approval_id}") from None
        self.audit(who, via, f"{verb} approval {approval_id}", 200, d.message)
        if d.changed and approve:
            self.on_approved()
        return {"approval": approval_id, "changed": d.changed, "status": d.status,
                "message": d.message, "incident_id": d.incident_id}

    # -- verdicts and demoted steps (api/verdicts_view.py) ----------------------------

    def verdicts(self, params: Mapping[str, str]) -> dict[str, Any]:
        """GET /api/v1/remediation/verdicts."""
        return verdicts_view.verdicts(self.db, params, self.now_ms())

    def promote(self, policy: str, step: int, who: Principal, via: str) -> dict[str, Any]:
        """POST /api/v1/remediation/policies/{policy}/steps/{step}/promote (audited): a
        demoted step acts on its own again (the engine reads it; nothing is called)."""
        from sentinel.respond.remediate.verdict_job import promote

        action = f"promote policy {policy} step {step}"
        if step < 1 or not promote(self.db, policy, step - 1, who.name, self.now_ms()):
            self.audit(who, via, action, 409, "not demoted")
            raise ApiError(409, f"policy {policy} step {step} is not demoted")
        self.audit(who, via, action, 200, "")
        return {"policy": policy, "step": step, "promoted": True}

    # -- what people do to an incident (api/acts.py) ---------------------------------

    def acknowledge(self, incident_id: int, who: Principal, via: str) -> dict[str, Any]:
        """POST /api/v1/incidents/{id}/acknowledge: no more repeats or escalations."""
        return acts.act(self, incident_id, who, via, "acknowledge", lambda: operator.acknowledge(
            self.db, incident_id, who.name, self.now_ms()))

    def assign(self, incident_id: int, owner: str, who: Principal, via: str) -> dict[str, Any]:
        """POST /api/v1/incidents/{id}/owner {owner} ("" removes the owner)."""
        return acts.act(self, incident_id, who, via, "assign", lambda: operator.assign(
            self.db, incident_id, owner, who.name, self.now_ms()))

    def add_note(self, incident_id: int, text: str, who: Principal, via: str
                 ) -> dict[str, Any]:
        """POST /api/v1/incidents/{id}/notes {text}."""
        return acts.act(self, incident_id, who, via, "note", lambda: operator.add_note(
            self.db, incident_id, text, who.name, self.now_ms()))

    def silence_incident(self, incident_id: int, body: Any, who: Principal, via: str
                         ) -> dict[str, Any]:
        """POST /api/v1/incidents/{id}/silence {matchers?, duration?, comment}."""
        return acts.silence_incident(self, incident_id, body, who, via)

    def request_diagnosis(self, incident_id: int, who: Principal, via: str) -> dict[str, Any]:
        """POST /api/v1/incidents/{id}/diagnose: the diagnosis job runs it at once."""
        if not self.diagnosis_enabled:
            self.audit(who, via, f"diagnose incident {incident_id}", 409, "not configured")
            raise ApiError(409, "diagnosis is not configured (diagnosis.endpoints)")
        out = acts.act(self, incident_id, who, via, "diagnose", lambda: operator.request_diagnosis(
            self.db, incident_id, who.name, self.now_ms()))
        self.on_diagnosis_requested()
        return out

    # -- Alertmanager API v2 alerts ---------------------------------------------------

    def alerts_v2(self, filters: Sequence[str], params: Mapping[str, str],
                  grouped: bool = False) -> list[dict[str, Any]]:
        """GET /api/v2/alerts (gettableAlerts) or /api/v2/alerts/groups (alertGroups)."""
        from sentinel.api import alerts_v2

        query = alerts_v2.AlertQuery.parse(filters, params)
        routing = self.alert_routing or alerts_v2.AlertRouting()
        read = alerts_v2.list_groups if grouped else alerts_v2.list_alerts
        return read(self.db, routing, query, self.external_url, self.now_ms())

    # -- silences ---------------------------------------------------------------------

    def silence(self, silence_id: str) -> dict[str, Any]:
        """GET /api/v2/silence/{id}: by UUID, or by the integer id older clients were given."""
        from sentinel.api import silences_v2

        found = silences_v2.get_v2(self.db, silence_id, self.now_ms())
        if found is None:
            raise ApiError(404, f"no silence {silence_id}")
        return found

    def silences(self) -> list[dict[str, Any]]:
        """Every silence (expired too) in Alertmanager API v2's GettableSilence form."""
        from sentinel.api import silences_v2

        return silences_v2.list_v2(self.db, self.now_ms())

    def create_silence(self, body: Mapping[str, Any], who: Principal, via: str
                       ) -> dict[str, Any]:
        """POST /api/v2/silences (audited); the author is the token's name."""
        from sentinel.api import silences_v2

        size = len(json.dumps(body, default=str).encode()) if body is not None else 0
        if size > MAX_SILENCE_BYTES:
            # The API's body limit, for every surface: MCP hands the body over in-process.
            self.audit(who, via, "create silence", 413, f"{size} bytes")
            raise ApiError(413, f"silence of {size} bytes is larger than {MAX_SILENCE_BYTES}")
        try:
            sid = silences_v2.create_v2(self.db, body, who.name, self.now_ms())
        except ValueError as exc:
            self.audit(who, via, "create silence", 400, str(exc))
            raise ApiError(400, str(exc)) from None
        self.audit(who, via, f"create silence {sid}", 200, "")
        return {"silenceID": str(sid)}

    def expire_silence(self, silence_id: str, who: Principal, via: str) -> None:
        """DELETE /api/v2/silence/{id} (audited)."""
        from sentinel.respond.notify.silences import SilenceError, expire_silence

        try:
            expire_silence(self.db, silence_id, self.now_ms())
        except SilenceError as exc:
            self.audit(who, via, f"expire silence {silence_id}", 404, str(exc))
            raise ApiError(404, str(exc)) from None
        self.audit(who, via, f"expire silence {silence_id}", 200, "")

    # -- audit ------------------------------------------------------------------------

    def audit(self, who: Principal, via: str, action: str, status: int, detail: str) -> None:
        """One row per write: who (token name, never its value), when, what, outcome."""
        with self.db.session() as s:
            s.add(ApiAudit(at=ms_to_dt(self.now_ms()), who=who.name, via=via, action=action,
                           status=status, detail=detail[:2000]))


def _pool_for(query_fn: Callable[[str, int], Any] | None) -> QueryPool:
    """A pool forking children for the embedded engine; in-process for a remote backend."""
    from sentinel.promql.engine import Engine

    engine = getattr(query_fn, "__self__", None)
    if not isinstance(engine, Engine):
        return QueryPool(isolate=False)
    store = engine.store
    locks = tuple(lock for lock in (getattr(store, "_lock", None), getattr(store, "_data", None))
                  if lock is not None)
    return QueryPool(timeout_s=engine.timeout_s, locks=locks)


def _capped(result: Any) -> Any:
    """A vector cut to what the API returns, so a child never pickles more."""
    return result[:MAX_QUERY_RESULT] if isinstance(result, list) else result
