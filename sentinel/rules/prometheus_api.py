"""The remote query backend: a Prometheus-compatible HTTP API (`/api/v1/query`).

    api = PrometheusAPI(QueryBackendConfig(url="http://prometheus:9090"))
    api.query('sum by (target) (vllm:num_requests_waiting) > 0', at_ms=now_ms)

Each instant query is a POST form (`query`, `time` = the evaluation time in
seconds, `timeout` in float seconds), as Prometheus's own clients send long
expressions; `method: GET` puts them in the URL instead (Managed Service for
Prometheus documents GET). The
JSON answer (`{"status", "data": {"resultType", "result"}}`) becomes the
engine's types: a vector → `Vector` (labels incl. `__name__`, values parsed
from strings: "NaN", "+Inf", "-Inf"), a scalar → float; a string result is an
error, as the embedded engine treats it. `query_range` returns RangeSeries
(for evidence and checks over a window).

Failures (`QueryBackendError`): no answer (refused, reset, timeout), 429 and
5xx are retried with exponential backoff and full jitter until the query's
budget (`timeout`) is spent; any other status (400 bad query, 422 cannot be
executed) is permanent at once. Within one evaluation time, a query that
failed for lack of a backend makes the following queries at that same
time fail at once: one outage costs each evaluation one timeout, not one per
rule. Messages carry the status and Prometheus's error text, never the URL's
credentials or a token.

HTTP: httpx's blocking client. Rule groups run on the scheduler's worker
threads and, against this backend, evaluate their independent rules
concurrently on a shared pool (rules/concurrent.py), each query bounded by
the group's deadline (rules/deadline.py), so a blocking call per rule is the
natural shape; the scrape
client in `collect/` is async, lives on the I/O loop and is tuned for GETs of
exposition pages, and routing evaluation through that loop would put rules
behind scrapes (design: evaluation never waits behind collection).
"""

from __future__ import annotations

import base64
import math
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sentinel.config.querybackend import QueryBackendConfig
from sentinel.httpstatus import retryable
from sentinel.model import METRIC_NAME, InstantSample, Labels, Vector, labels_of
from sentinel.promql.calls import RangeSeries
from sentinel.rules.deadline import query_deadline
from sentinel.secrets import read_secret_file

BACKOFF_BASE_S = 0.1
BACKOFF_MAX_S = 2.0
GOOGLE_SCOPE = "https://www.googleapis.com/auth/monitoring.read"


class QueryBackendError(Exception):
    """A remote query failed. `retryable`: no answer, 429 or 5xx; `reason` labels the counter."""

    def __init__(self, message: str, *, retryable: bool, reason: str) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.reason = reason


class BackendMetrics:
    """The backend's counters on Sentinel's registry, and the gauge the self-alert reads."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry()
        self.queries = Counter("sentinel_query_backend_queries_total",
                               "Queries sent to the remote query backend.", registry=r)
        self.errors = Counter(
            "sentinel_query_backend_errors_total",
            "Queries to the remote backend that failed after retries, by reason.",
            ["reason"], registry=r)
        self.retries = Counter("sentinel_query_backend_retries_total",
                               "Attempts retried (no answer, 429, 5xx).", registry=r)
        self.up = Gauge("sentinel_query_backend_up",
                        "1 when the last query to the remote backend answered, else 0.",
                        registry=r)
        self.seconds = Histogram(
            "sentinel_query_backend_duration_seconds",
            "Time of one query to the remote backend, retries included.", registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.up.set(1)


class PrometheusAPI:
    """Instant and range queries against a Prometheus-compatible HTTP API."""

    def __init__(self, config: QueryBackendConfig, metrics: BackendMetrics | None = None,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None) -> None:
        self.config = config
        self.metrics = metrics or BackendMetrics()
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._client = httpx.Client(base_url=config.url, headers=dict(config.headers),
                                    transport=transport, follow_redirects=False)
        self._google: Any = _google_credentials(config.google_credentials)
        self._lock = threading.Lock()
        # (evaluation time, error) of the last query that failed for lack of a backend.
        self._down: tuple[int, QueryBackendError] | None = None

    def close(self) -> None:
        """Close idle connections."""
        self._client.close()

    # -- queries ---------------------------------------------------------------
    def query(self, expr: Any, at_ms: int) -> Vector | float:
        """The value of `expr` (text) at `at_ms`: a Vector or a float (scalar)."""
        with self._lock:
            down = self._down
        if down is not None and down[0] == at_ms:
            raise QueryBackendError(f"{down[1]} (earlier query at this evaluation)",
                                    retryable=True, reason=down[1].reason)
        data = self._call("/api/v1/query", {"query": str(expr), "time": _seconds(at_ms)}, at_ms)
        try:
            return parse_instant(data)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            self.metrics.errors.labels("bad_response").inc()
            raise QueryBackendError(f"query backend: malformed result: {e!r}"[:300],
                                    retryable=False, reason="bad_response") from None

    def query_range(self, expr: str, start_ms: int, end_ms: int, step_ms: int
                    ) -> list[RangeSeries]:
        """The value of `expr` at every step in [start_ms, end_ms]."""
        data = self._call("/api/v1/query_range",
                          {"query": expr, "start": _seconds(start_ms), "end": _seconds(end_ms),
                           "step": _seconds(step_ms)}, None)
        if data.get("resultType") != "matrix":
            raise QueryBackendError(f"range query returned {data.get('resultType')!r}",
                                    retryable=False, reason="bad_response")
        return [RangeSeries(_labels(s["metric"]), [_ms(t) for t, _ in s["values"]],
                            [parse_float(v) for _, v in s["values"]])
                for s in data["result"]]

    def _call(self, path: str, form: dict[str, str], at_ms: int | None) -> dict[str, Any]:
        """POST the form; retry what is worth it within the budget; count the outcome."""
        m = self.metrics
        m.queries.inc()
        start = time.monotonic()
        deadline = start + self.config.timeout_ms / 1000
        # Inside a rule group, the group's interval may end sooner (rules/deadline.py).
        group = query_deadline.get()
        capped = group is not None and group < deadline
        if group is not None and capped:
            deadline = group
        attempt = 0
        try:
            while True:
                remaining = deadline - time.monotonic()
                if capped and remaining <= 0:
                    raise QueryBackendError("query backend: no time left in the rule group's "
                                            "interval", retryable=False, reason="deadline")
                try:
                    data = self._attempt(path, {**form, "timeout": f"{max(remaining, 0.001):.3f}"},
                                         max(remaining, 0.001))
                except QueryBackendError as e:
                    pause = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** attempt) * self._rng.random()
                    if not e.retryable or time.monotonic() + pause >= deadline:
                        raise
                    attempt += 1
                    m.retries.inc()
                    self._sleep(pause)
                    continue
                with self._lock:
                    self._down = None
                m.up.set(1)
                return data
        except QueryBackendError as e:
            m.errors.labels(e.reason).inc()
            if e.reason == "deadline":
                raise  # never sent: no word on the backend
            m.up.set(0 if e.retryable else 1)  # a 4xx is an answer: the backend is up
            if e.retryable:
                if at_ms is not None:
                    with self._lock:
                        self._down = (at_ms, e)
            raise
        finally:
            m.seconds.observe(time.monotonic() - start)

    def _attempt(self, path: str, form: dict[str, str], timeout_s: float) -> dict[str, Any]:
        try:
            if self.config.method == "GET":
                resp = self._client.get(path, params=form, headers=self._auth(),
                                        timeout=timeout_s)
            else:
                resp = self._client.post(path, data=form, headers=self._auth(),
                                         timeout=timeout_s)
        except httpx.TimeoutException:
            raise QueryBackendError("query backend: no answer (timed out)",
                                    retryable=True, reason="timeout") from None
        except httpx.TransportError as e:
            raise QueryBackendError(f"query backend: {type(e).__name__}: {e}",
                                    retryable=True, reason="connection") from None
        if resp.status_code != 200:
            retry = retryable(resp.status_code)
            raise QueryBackendError(
                f"query backend: HTTP {resp.status_code}: {_error_text(resp)}",
                retryable=retry, reason="http_5xx_429" if retry else "bad_query")
        try:
            body = resp.json()
            if body.get("status") != "success":
                raise ValueError(body.get("error", "status is not success"))
            return dict(body["data"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise QueryBackendError(f"query backend: malformed answer: {e}"[:300],
                                    retryable=False, reason="bad_response") from None

    def _auth(self) -> dict[str, str]:
        """Per-request credentials: token files are re-read, so a rotated token is picked up."""
        c = self.config
        if c.bearer_token_file is not None:
            return {"Authorization": f"Bearer {read_secret_file(Path(c.bearer_token_file))}"}
        if c.basic_auth is not None:
            pw = read_secret_file(Path(c.basic_auth.password_file))
            pair = base64.b64encode(f"{c.basic_auth.username}:{pw}".encode()).decode()
            return {"Authorization": f"Basic {pair}"}
        if self._google is not None:
            return {"Authorization": f"Bearer {self._google_token()}"}
        return {}

    def _google_token(self) -> str:
        from google.auth.transport.requests import Request

        creds = self._google
        if not creds.valid:
            with self._lock:
                if not creds.valid:
                    creds.refresh(Request())
        return str(creds.token)


# -- conversion -------------------------------------------------------------------
def parse_instant(data: dict[str, Any]) -> Vector | float:
    """An instant query's `data` as the engine's result: a Vector or a float."""
    kind, result = data.get("resultType"), data.get("result") or []
    if kind == "vector":
        return [InstantSample(_labels(s["metric"]), parse_float(s["value"][1])) for s in result]
    if kind == "scalar":
        return parse_float(result[1])
    if kind == "string":
        raise QueryBackendError("expression must return an instant vector or a scalar "
                                f"(got the string {result[1]!r})", retryable=False,
                                reason="bad_query")
    raise QueryBackendError(f"instant query returned {kind!r}", retryable=False,
                            reason="bad_response")


def parse_float(text: str) -> float:
    """Prometheus's sample value strings: "1.5", "NaN", "+Inf", "-Inf"."""
    value = float(text)  # Python reads all four forms
    return math.nan if value != value else value


def _labels(metric: dict[str, str]) -> Labels:
    return labels_of({k: v for k, v in metric.items() if k != METRIC_NAME or v})


def _seconds(ms: int) -> str:
    return f"{ms // 1000}.{ms % 1000:03d}"


def _ms(seconds: float) -> int:
    return int(round(float(seconds) * 1000))


def _error_text(resp: httpx.Response) -> str:
    try:
        body = resp.json()
        return f"{body.get('errorType', '')}: {body.get('error', '')}"[:300]
    except ValueError:
        return resp.reason_phrase or "no body"


def _google_credentials(setting: str | None) -> Any:
    """Google credentials for Managed Service for Prometheus (needs google-auth)."""
    if setting is None:
        return None
    try:
        import google.auth
        from google.oauth2 import service_account
    except ImportError as e:  # pragma: no cover - google-auth is a dependency of the gcp extra
        raise RuntimeError("google_credentials needs the google-auth package") from e
    if setting == "default":
        creds, _ = google.auth.default(scopes=[GOOGLE_SCOPE])
        return creds
    return service_account.Credentials.from_service_account_file(setting, scopes=[GOOGLE_SCOPE])
