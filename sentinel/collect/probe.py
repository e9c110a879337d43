"""Probe a vLLM server's serving path: /health, /v1/models and a streaming canary completion.

A scrape only proves that the API server answers `/metrics`; the failure
operators report most is an engine wedged behind a live front end (`/health`
200, requests hang). Per target and probe interval:

- `GET /health`: 200 within the timeout, or not;
- `GET /v1/models`: 200 and a model card (its id names the canary's model,
  `max_model_len` is kept for the record); asked at the first probe, then
  every few minutes or after a failure (the runner decides);
- a canary chat completion: streaming, a fixed short prompt, `max_tokens`
  2 (8 when an answer is expected), temperature 0. It measures time to
  first token (the first chunk with text) and total time, and checks the
  answer: every event decodes, the text is not empty, and it contains
  `expect` when the operator set one.

Each probe yields `sentinel_probe_success{target,probe}` (1/0),
`sentinel_probe_duration_seconds{target,probe}` and
`sentinel_probe_http_status{target,probe}` (0: no HTTP answer); the canary
also `sentinel_probe_ttft_seconds{target}`. A canary skipped because the
target's own counters prove tokens are flowing writes staleness markers, so
an old verdict does not linger for the 5-minute lookback. The daemon stores
those a loaded rule reads, as it does scraped series (`ProbeJobs`).

/health and the canary go out together once the model is known, so a
server that hangs every answer holds a round for one timeout, not two
(two would outlast the 15 s interval at the defaults).

The network code is async, on the daemon's one I/O loop beside the scrapes,
through `ProbeClient`: kept-alive HTTP/1.1 connections whose answers are
parsed as they arrive (`sentinel.collect.http1`, the scrapes' client), so a
probe costs a few requests and one wake-up each, not a thread. `probe_target` never raises.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from sentinel.collect.http1 import Connection, HTTPError, Response, build_request
from sentinel.model import METRIC_NAME, STALE_NAN, Labels, labels_of

CANARY_PROMPT = "Reply with one word: ok"
# The canary asks for 2 tokens: the first gives the time to first token, the second
# proves decoding goes on; each further token is one more event for the server to
# stream and for Sentinel to wake up for (most of a canary's CPU, bench/fleet.py
# --traffic idle), and more load on a server that may be busy. With `expect` set
# the answer must have room to contain it: 8.
CANARY_MAX_TOKENS = 8
CANARY_PLAIN_MAX_TOKENS = 2
HEALTH, MODELS, CANARY = "health", "models", "canary"
_PATHS = {"health": "/health", "models": "/v1/models"}
USER_AGENT = "Sentinel"
# json's C scanner (typeshed does not list the attribute): (value, end) or StopIteration.
_SCAN: Callable[[str, int], tuple[Any, int]] = (
    json.JSONDecoder().scan_once)  # type: ignore[attr-defined]
MAX_BODY_BYTES = 1024 * 1024  # a model list or an 8-token answer: far less

Sample = tuple[Labels, float]


@dataclass(frozen=True, slots=True)
class ProbeTarget:
    """What to probe on one target, and how (durations in ms)."""

    name: str
    url: str
    labels: Labels = ()
    interval_ms: int = 15_000
    timeout_ms: int = 10_000
    canary: bool = True
    expect: str = ""
    skip_canary_when_busy: bool = True
    api_key: str = field(default="", repr=False)

    def headers(self) -> dict[str, str]:
        """The Authorization header when the target has an API key (vLLM's --api-key)."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The outcome of one probe of one target."""

    probe: str
    success: bool
    duration_s: float
    status: int = 0  # HTTP status; 0 when the server never answered
    error: str | None = None
    ttft_s: float | None = None
    model: str | None = None
    max_model_len: int | None = None
    completion_tokens: int = 0  # what the canary itself added to the server's counters


class ProbeFailed(Exception):
    """A probe got an answer, but not a good one."""


async def probe_health(client: ProbeClient, t: ProbeTarget,
                       clock: Callable[[], float] = time.monotonic) -> ProbeResult:
    """GET /health: success is a 200 within the timeout."""
    start = clock()
    try:
        resp = await client.send(t, "health", None)
    except (HTTPError, TimeoutError) as exc:
        return ProbeResult(HEALTH, False, clock() - start, 0, _describe(exc, t))
    ok = resp.status == 200
    return ProbeResult(HEALTH, ok, clock() - start, resp.status,
                       None if ok else f"HTTP {resp.status}")


async def probe_models(client: ProbeClient, t: ProbeTarget,
                       clock: Callable[[], float] = time.monotonic) -> ProbeResult:
    """GET /v1/models: a 200 with at least one model card (its id and max_model_len)."""
    start = clock()
    try:
        resp = await client.send(t, "models", None)
    except (HTTPError, TimeoutError) as exc:
        return ProbeResult(MODELS, False, clock() - start, 0, _describe(exc, t))
    try:
        if resp.status != 200:
            raise ProbeFailed(f"HTTP {resp.status}")
        cards = json.loads(resp.body).get("data") or []
        if not cards or not isinstance(cards[0], dict) or not cards[0].get("id"):
            raise ProbeFailed("no model served")
    except (ProbeFailed, ValueError, AttributeError) as exc:
        return ProbeResult(MODELS, False, clock() - start, resp.status,
                           str(exc) or "bad answer")
    length = cards[0].get("max_model_len")
    return ProbeResult(MODELS, True, clock() - start, 200, model=str(cards[0]["id"]),
                       max_model_len=length if isinstance(length, int) else None)


async def probe_canary(client: ProbeClient, t: ProbeTarget, model: str | None,
                       clock: Callable[[], float] = time.monotonic) -> ProbeResult:
    """A streaming chat completion: TTFT, total time, and an answer that makes sense.

    The events are parsed as their bytes arrive (the client's sink), so the
    time to first token is read when the first chunk carrying text comes in.
    """
    start = clock()
    canary = _Canary(start, clock)
    try:
        resp = await client.send(t, "canary", model, canary.feed_bytes)
        canary.status = resp.status
        if resp.status != 200:
            raise ProbeFailed(f"HTTP {resp.status}")
        canary.check(t.expect)
    except TimeoutError:
        return canary.result(False, f"no answer within {t.timeout_ms / 1000:g}s"
                             + ("" if canary.ttft_s is not None else " (no token)"))
    except HTTPError as exc:
        return canary.result(False, _describe(exc, t))
    except ProbeFailed as exc:
        return canary.result(False, str(exc))
    return canary.result(True, None)


def canary_body(model: str | None, expect: str = "") -> bytes:
    """The canary's request: a fixed prompt, 2 tokens (8 to hold `expect`), temperature 0,
    streamed."""
    body: dict[str, object] = {
        "messages": [{"role": "user", "content": CANARY_PROMPT}],
        "max_tokens": CANARY_MAX_TOKENS if expect else CANARY_PLAIN_MAX_TOKENS,
        "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model:
        body["model"] = model
    return json.dumps(body, separators=(",", ":")).encode()


class _Origin:
    """One target's probe connections (kept alive, at most two idle) and prepared requests."""

    def __init__(self, t: ProbeTarget) -> None:
        self.spec = t
        self.idle: list[Connection] = []
        self.requests: dict[tuple[str, str | None], bytes] = {}

    def request(self, kind: str, model: str | None) -> bytes:
        key = (kind, model if kind == "canary" else None)
        req = self.requests.get(key)
        if req is None:
            if len(self.requests) > 8:  # models come and go: keep a few
                self.requests.clear()
            t = self.spec
            prefix = urlsplit(t.url).path.rstrip("/")  # http://h/vllm + /health → /vllm/health
            headers = {"User-Agent": USER_AGENT, **t.headers()}
            if kind == "canary":
                headers.update({"Content-Type": "application/json",
                                "Accept": "text/event-stream"})
                req = build_request(t.url, prefix + "/v1/chat/completions", headers, "POST",
                                    canary_body(model, t.expect))
            else:
                headers["Accept"] = "application/json"
                req = build_request(t.url, prefix + _PATHS[kind], headers)
            self.requests[key] = req
        return req


class ProbeClient:
    """The probes' HTTP client: `http1` connections, kept alive per target.

    Used on one event loop (the daemon's I/O loop, as the scrapes). A
    request takes an idle connection of its target or opens one, so /health
    and /v1/models may run side by side; at most two stay idle per target.
    Every request is bounded by the target's probe timeout.
    """

    def __init__(self, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.max_bytes = max_bytes
        self._origins: dict[str, _Origin] = {}

    async def send(self, t: ProbeTarget, kind: str, model: str | None,
                   sink: Callable[[bytes], None] | None = None) -> Response:
        """One probe request ("health", "models", "canary") to `t`; raises HTTPError or
        TimeoutError."""
        origin = self._origins.get(t.name)
        if origin is None or (origin.spec is not t and origin.spec != t):
            if origin is not None:
                self._drop(origin)
            self._origins[t.name] = origin = _Origin(t)
        conn = origin.idle.pop() if origin.idle else Connection(t.url)
        deadline = asyncio.get_running_loop().time() + t.timeout_ms / 1000
        try:
            return await conn.get(origin.request(kind, model), self.max_bytes, sink, deadline)
        finally:  # a failed connection closed itself; it reconnects when used again
            if len(origin.idle) < 2 and self._origins.get(t.name) is origin:
                origin.idle.append(conn)
            else:
                conn.close()

    def close(self) -> None:
        """Close every idle connection (call on the loop, or after it stopped)."""
        for origin in self._origins.values():
            self._drop(origin)
        self._origins.clear()

    async def aclose(self) -> None:
        """`close`, as a coroutine."""
        self.close()

    async def __aenter__(self) -> ProbeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _drop(origin: _Origin) -> None:
        for conn in origin.idle:
            conn.close()
        origin.idle.clear()


class _Canary:
    """Reads the canary's server-sent events as they arrive."""

    def __init__(self, start: float, clock: Callable[[], float]) -> None:
        self.start = start
        self.clock = clock
        self.status = 0
        self.text = ""
        self.ttft_s: float | None = None
        self.tokens = 0
        self.done = False
        self._buf = b""

    def feed_bytes(self, data: bytes) -> None:
        """Take a piece of the body as it arrived; whole lines are read at once."""
        if b"\n" not in data:
            self._buf += data
            return
        head, _, self._buf = (self._buf + data).rpartition(b"\n")
        # One decode for the piece (no UTF-8 sequence holds a newline); a bad byte reads
        # as U+FFFD, which `check` refuses as corrupted. Only data lines cost a call.
        for line in head.decode("utf-8", "replace").split("\n"):
            if line.startswith("data:"):
                self._event(line[5:].strip())

    def feed(self, line: str) -> None:
        """Take one SSE line. Raises ProbeFailed on garbage."""
        if line.startswith("data:"):
            self._event(line[5:].strip())

    def _event(self, data: str) -> None:
        if self.done:
            return
        if data == "[DONE]":
            self.done = True
            return
        try:
            # The C scanner, as json.loads uses it, without its wrappers: one call an
            # event (the events are most of a canary's parsing). Nothing may follow.
            event, end = _SCAN(data, 0)
            if end != len(data):
                raise ValueError("extra data")
            choices = event.get("choices") or []
            usage = event.get("usage") or {}
        except (StopIteration, ValueError, AttributeError):
            raise ProbeFailed("answer does not decode (not JSON)") from None
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.tokens = usage["completion_tokens"]
        for choice in choices:
            delta = (choice or {}).get("delta") or {}
            content = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(content, str) and content:
                if self.ttft_s is None:
                    self.ttft_s = self.clock() - self.start
                self.text += content

    def check(self, expect: str) -> None:
        if self._buf.strip():  # a last line without its newline
            self.feed(self._buf.decode("utf-8", "replace"))
            self._buf = b""
        if not self.done:
            raise ProbeFailed("stream ended without [DONE]")
        if not self.text.strip():
            raise ProbeFailed("empty answer")
        if "\ufffd" in self.text or "\x00" in self.text:
            raise ProbeFailed("answer is corrupted (replacement or NUL characters)")
        if expect and expect.lower() not in self.text.lower():
            raise ProbeFailed(f"answer does not contain {expect!r}")

    def result(self, ok: bool, error: str | None) -> ProbeResult:
        return ProbeResult(CANARY, ok, self.clock() - self.start, self.status, error,
                           self.ttft_s, completion_tokens=self.tokens)


async def probe_target(client: ProbeClient, t: ProbeTarget, now_ms: int, *,
                       busy: bool = False, canary_slots: asyncio.Semaphore | None = None,
                       model: str | None = None,
                       clock: Callable[[], float] = time.monotonic,
                       ) -> tuple[list[Sample], list[ProbeResult]]:
    """Probe one target; the samples to store at `now_ms` and the results. Never raises.

    `busy`: the target's counters prove tokens are flowing, so the canary is
    skipped (when the target allows it). `canary_slots` caps canaries in
    flight across the fleet; a canary waits for a slot only as long as its
    interval leaves beside its timeout (`slot_wait_s`), else it is not sent
    this time (its series go stale, as for a busy target), so a fleet that
    wants more canaries than the cap allows never delays its probes past
    their interval. `model`: the served model, already learnt from
    /v1/models; when given, /v1/models is not asked this time (the caller
    refreshes it every few minutes: it costs as much CPU as /health).
    """
    del now_ms  # the caller stores the samples at the time it chose
    send_canary = t.canary and not (busy and t.skip_canary_when_busy)
    try:
        if model is None:  # the canary names the model: learn it first
            health, models = await asyncio.gather(probe_health(client, t, clock),
                                                  probe_models(client, t, clock))
            results = [health, models]
            canary = (await _slotted_canary(client, t, models.model, canary_slots, clock)
                      if send_canary else None)
        elif send_canary:
            # /health and the canary go out together: their answers come back in the
            # same wake-ups of the loop, and a round takes the longer of the two, not both.
            # One task (the canary's) beside this one, not gather's two and its future.
            task = asyncio.ensure_future(_slotted_canary(client, t, model, canary_slots, clock))
            try:
                results = [await probe_health(client, t, clock)]
                canary = await task
            finally:
                task.cancel()  # done already, unless something above raised
        else:
            results, canary = [await probe_health(client, t, clock)], None
        if canary is not None:
            results.append(canary)
    except Exception as exc:  # a bug, not the target: record it, keep the loop alive
        results = [ProbeResult(p, False, 0.0, 0, f"internal error: {type(exc).__name__}: {exc}")
                   for p in (HEALTH, MODELS)]
    skipped = t.canary and not any(r.probe == CANARY for r in results)
    return samples_of(t, results, canary_skipped=skipped), results


async def _slotted_canary(client: ProbeClient, t: ProbeTarget, model: str | None,
                          slots: asyncio.Semaphore | None,
                          clock: Callable[[], float]) -> ProbeResult | None:
    """The canary, under the fleet-wide cap when there is one; None when no slot came."""
    if slots is None:
        return await probe_canary(client, t, model, clock)
    if not await _take_slot(slots, slot_wait_s(t)):
        return None
    try:
        return await probe_canary(client, t, model, clock)
    finally:
        slots.release()


def slot_wait_s(t: ProbeTarget) -> float:
    """How long a canary may wait for a slot under the fleet cap: its interval less its timeout."""
    return max(0.0, (t.interval_ms - t.timeout_ms) / 1000)


async def _take_slot(slots: asyncio.Semaphore, wait_s: float) -> bool:
    if not slots.locked():
        await slots.acquire()  # free: returns at once
        return True
    if wait_s <= 0:
        return False
    try:
        async with asyncio.timeout(wait_s):
            await slots.acquire()
    except TimeoutError:
        return False
    return True


_LABELS: dict[tuple[str, Labels], dict[tuple[str, str], Labels]] = {}


def samples_of(t: ProbeTarget, results: list[ProbeResult],
               canary_skipped: bool = False) -> list[Sample]:
    """The series of a set of probe results, as the store takes them."""
    out: list[Sample] = []
    # Label sets are built once per target and series: sorting them at every
    # probe was a third of a probe's CPU without canary.
    known = _LABELS.get((t.name, t.labels))
    if known is None:
        if len(_LABELS) > 20_000:
            _LABELS.clear()
        known = _LABELS[(t.name, t.labels)] = {}

    def add(name: str, value: float, probe: str = "") -> None:
        labels = known.get((name, probe))
        if labels is None:
            extra = {"probe": probe} if probe else {}
            labels = known[(name, probe)] = labels_of(
                {"target": t.name, **dict(t.labels), **extra, METRIC_NAME: name})
        out.append((labels, value))

    for r in results:
        add("sentinel_probe_success", float(r.success), probe=r.probe)
        add("sentinel_probe_duration_seconds", r.duration_s, probe=r.probe)
        add("sentinel_probe_http_status", float(r.status), probe=r.probe)
        if r.probe == CANARY:
            # No token at all: no TTFT sample (the success series says it failed).
            add("sentinel_probe_ttft_seconds", r.ttft_s if r.ttft_s is not None else STALE_NAN)
    if canary_skipped:
        for name in ("sentinel_probe_success", "sentinel_probe_duration_seconds",
                     "sentinel_probe_http_status"):
            add(name, STALE_NAN, probe=CANARY)
        add("sentinel_probe_ttft_seconds", STALE_NAN)
    return out


def tokens_flowing(previous_total: float | None, current_total: float | None,
                   own_tokens: float) -> bool:
    """Whether a target's generation-token counter moved by more than our own canaries added.

    None (no reading) or a counter reset proves nothing: the canary runs.
    """
    if previous_total is None or current_total is None or current_total < previous_total:
        return False
    return current_total - previous_total - own_tokens > 0


def _describe(exc: Exception, t: ProbeTarget) -> str:
    if isinstance(exc, TimeoutError):
        return f"timed out after {t.timeout_ms / 1000:g}s"
    return str(exc)
