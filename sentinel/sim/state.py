"""What the simulated vLLM server is doing right now, and how a control request changes it.

`SimState` is the whole injectable condition of a server; the HTTP layer
reads it on every request and `/metrics` renders from it. `apply_update` is
the only way to change it: a partial update (JSON object) is validated as a
whole, so a bad field changes nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class SimStateError(ValueError):
    """A control request named an unknown field, a wrong type or a value out of range."""


@dataclass(frozen=True)
class SimState:
    """The injectable condition of a simulated vLLM server (every engine shows the same).

    kv_cache_usage: 0..1, as `vllm:kv_cache_usage_perc`.
    num_requests_running / num_requests_waiting: scheduler gauges.
    num_preemptions_total: the preemption counter; it may only grow.
    prefix_cache_hit_rate: share of each request's prompt tokens counted as prefix-cache hits.
    healthy: False answers /health with 503 and chat with 500, like a dead engine.
    down: True closes every connection without an answer (process hung or gone).
    latency_s: extra delay before every answer (and before the first streamed token).
    garbage_metrics: serve a malformed /metrics page.
    chat_fault: how chat completions fail, for tests of model clients: "" (none),
        "timeout" (no answer for CHAT_TIMEOUT_S), "http_400", "http_500",
        "truncated_stream" (the connection drops mid-answer), "invalid_json"
        (a structured-output request gets text that is not JSON).
    chat_fault_count: how many chat requests the fault hits before it clears
        itself; 0 keeps it until it is changed.
    stalled: the engine is wedged behind a live front end (vllm #39863, LLMKube
        #1624): /health and /v1/models answer 200, chat requests are accepted but
        no token is ever streamed, token counters stay frozen; running/waiting
        show what was set.
    sleeping: vLLM's sleep mode: `vllm:engine_sleep_state{sleep_state="awake"}`
        is 0 (level 1: weights offloaded) and chat requests are refused with 503.
    ttft_s: extra delay before the first token (the TTFT histogram observes it).
    garbage_output: chat answers 200 with an empty completion (no text at all).
    load_rps: synthetic finished requests per second counted into /metrics, so the
        counters move as a busy server's do (the traffic generator; 0 = idle).
    model_dialect: which server's chat API to play (structured.DIALECTS): "vllm",
        "llamacpp", "tgi" or "ollama": the structured-output forms it takes, whether
        streams carry usage, whether /tokenize exists.
    """

    kv_cache_usage: float = 0.0
    num_requests_running: int = 0
    num_requests_waiting: int = 0
    num_preemptions_total: int = 0
    prefix_cache_hit_rate: float = 0.0
    healthy: bool = True
    down: bool = False
    latency_s: float = 0.0
    garbage_metrics: bool = False
    chat_fault: str = ""
    chat_fault_count: int = 0
    stalled: bool = False
    sleeping: bool = False
    ttft_s: float = 0.0
    garbage_output: bool = False
    load_rps: float = 0.0
    model_dialect: str = "vllm"

    def to_json(self) -> dict[str, Any]:
        """The state as a JSON object (what GET /sim/state answers)."""
        return dataclasses.asdict(self)


# Annotations are strings under `from __future__ import annotations`; map them back.
_TYPES_BY_NAME: dict[str, type] = {"float": float, "int": int, "bool": bool, "str": str}
_FIELD_TYPES: dict[str, type] = {
    f.name: _TYPES_BY_NAME[str(f.type)] for f in dataclasses.fields(SimState)
}

_FRACTIONS = ("kv_cache_usage", "prefix_cache_hit_rate")
MODEL_DIALECTS = ("vllm", "llamacpp", "tgi", "ollama")  # structured.DIALECTS
CHAT_FAULTS = ("", "timeout", "http_400", "http_500", "truncated_stream", "invalid_json")


def _coerce(name: str, value: object) -> object:
    """The value checked against the field's type; ints are accepted for floats."""
    want = _FIELD_TYPES[name]
    # bool is a subclass of int in Python; JSON true must not pass as a count.
    if want is bool or want is str:
        if isinstance(value, want):
            return value
    elif want is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if math.isfinite(value):
            return float(value)
        raise SimStateError(f"{name}: must be a finite number, got {value!r}")
    raise SimStateError(f"{name}: expected {want.__name__}, got {type(value).__name__} {value!r}")


def _check_range(name: str, value: object, current: SimState) -> None:
    if name == "model_dialect" and value not in MODEL_DIALECTS:
        raise SimStateError(
            f"model_dialect: must be one of {', '.join(map(repr, MODEL_DIALECTS))}")
    if name == "chat_fault" and value not in CHAT_FAULTS:
        raise SimStateError(f"chat_fault: must be one of {', '.join(map(repr, CHAT_FAULTS))}")
    if name in _FRACTIONS and not 0.0 <= value <= 1.0:  # type: ignore[operator]
        raise SimStateError(f"{name}: must be between 0 and 1, got {value!r}")
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        raise SimStateError(f"{name}: must not be negative, got {value!r}")
    if name == "num_preemptions_total" and value < current.num_preemptions_total:  # type: ignore[operator]
        raise SimStateError(
            f"num_preemptions_total: a counter only grows "
            f"(now {current.num_preemptions_total}, got {value!r})"
        )


def apply_update(state: SimState, update: object) -> SimState:
    """The state with `update` applied; fields it does not name stay as they were.

    Raises SimStateError listing every problem when the update is not a JSON
    object, names unknown fields, or carries a wrong type or range.
    """
    if not isinstance(update, Mapping):
        raise SimStateError(f"state update must be a JSON object, got {type(update).__name__}")
    problems: list[str] = []
    changes: dict[str, object] = {}
    for name, raw in update.items():
        if name not in _FIELD_TYPES:
            problems.append(f"{name}: unknown field (known: {', '.join(sorted(_FIELD_TYPES))})")
            continue
        try:
            value = _coerce(name, raw)
            _check_range(name, value, state)
        except SimStateError as exc:
            problems.append(str(exc))
            continue
        changes[name] = value
    if problems:
        raise SimStateError("; ".join(problems))
    return dataclasses.replace(state, **changes)  # type: ignore[arg-type]
