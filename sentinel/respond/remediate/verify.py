"""Did the fix work? `/health` answers 200 and a one-token completion succeeds, within a deadline.

A restarted vLLM answers /health only once its engine is up; the completion
proves the model serves (the XLA graphs are loaded, the chip is ours). The
deadline is per action: seconds for a warm restart, tens of minutes for a
cold one. Every request has its own short timeout, so a hung server costs
one poll, not the whole deadline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

POLL_S = 0.2
REQUEST_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Verification:
    """The outcome: ok, what was last seen, and how long until healthy and until served."""

    ok: bool
    detail: str
    healthy_after_s: float | None = None
    served_after_s: float | None = None


def verify(base_url: str, deadline_s: float, poll_s: float = POLL_S) -> Verification:
    """Poll until /health is 200 and a one-token chat completion succeeds, or the deadline."""
    start = time.monotonic()
    until = start + deadline_s
    healthy_at: float | None = None
    last = "no answer yet"
    with httpx.Client(base_url=base_url.rstrip("/"), timeout=REQUEST_TIMEOUT_S) as http:
        while time.monotonic() < until:
            try:
                if healthy_at is None:
                    last = _health(http)
                    if last == "ok":
                        healthy_at = time.monotonic() - start
                        continue
                else:
                    last = _one_token(http)
                    if last == "ok":
                        return Verification(True, "healthy and serving", round(healthy_at, 3),
                                            round(time.monotonic() - start, 3))
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}"
            time.sleep(min(poll_s, max(0.0, until - time.monotonic())))
    stage = "/health" if healthy_at is None else "one-token completion"
    return Verification(False, f"not recovered within {deadline_s:g}s: {stage}: {last}",
                        None if healthy_at is None else round(healthy_at, 3))


def _health(http: httpx.Client) -> str:
    resp = http.get("/health")
    return "ok" if resp.status_code == 200 else f"HTTP {resp.status_code}"


def _one_token(http: httpx.Client) -> str:
    models = http.get("/v1/models")
    if models.status_code != 200:
        return f"/v1/models HTTP {models.status_code}"
    listing = _object(models)
    data = listing.get("data") if listing is not None else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict) \
            or not isinstance(data[0].get("id"), str):
        # A server still starting (or a proxy's page) answers 200 with something
        # else: not recovered yet, so poll on until the deadline rather than abort.
        return "/v1/models lists no model"
    resp = http.post("/v1/chat/completions", json={
        "model": data[0]["id"], "max_tokens": 1, "temperature": 0,
        "messages": [{"role": "user", "content": "ping"}]})
    if resp.status_code != 200:
        return f"completion HTTP {resp.status_code}"
    answer = _object(resp)
    if answer is None or not answer.get("choices"):
        return "completion without choices"
    return "ok"


def _object(resp: httpx.Response) -> dict[str, Any] | None:
    """The response's JSON object, None when the body is not one."""
    try:
        body = resp.json()
    except ValueError:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    return body if isinstance(body, dict) else None
