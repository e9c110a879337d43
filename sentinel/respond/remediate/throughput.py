"""A target's token throughput at a time, through whatever the rules query (the seam the
verdicts read: before the incident, when the action is claimed; and when the verdict is due).

The daemon's function asks the rules' query backend; without one (the CLI) throughput is
unknown and verdicts rest on recurrence alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Throughput = Callable[[str, int], float | None]  # (target, at_ms) → tokens/s, None: unknown
THROUGHPUT_SERIES = "vllm:generation_tokens_total"  # kept in the store when a policy exists
# Generated tokens per second over 5 minutes, all engines of the target.
EXPR = 'sum(rate(vllm:generation_tokens_total{{target="{target}"}}[5m]))'


def from_backend(backend: Any) -> Throughput:
    """Throughput read through a rules query backend (`query(expr, at_ms)`)."""
    def throughput(target: str, at_ms: int) -> float | None:
        if '"' in target or "\\" in target:
            return None  # never a name a selector would have to escape
        try:
            value = backend.query(EXPR.format(target=target), at_ms)
        except Exception:  # noqa: BLE001 - a figure worth less than the verdict
            log.debug("throughput of %s at %d unknown", target, at_ms, exc_info=True)
            return None
        if isinstance(value, float | int):
            return float(value)
        return float(sum(s.value for s in value)) if value else None
    return throughput


def before(fn: Throughput | None, target: str, at_ms: int) -> dict[str, float]:
    """The attempt data's `throughput_before` (tokens/s just before the failure), if known."""
    if fn is None:
        return {}
    value = fn(target, at_ms)
    return {} if value is None else {"throughput_before": round(value, 3)}
