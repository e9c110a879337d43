"""Metrics a rule needs must exist: find rules that select names no target exposes.

vLLM renames and removes metrics between releases (deprecated in X.Y, hidden
in X.Y+1, removed in X.Y+2). A rule on a removed name still loads, passes
`check config` and never fires. This module reads the metric names each
rule selects, and reports the ones no scraped target exposes, naming the
replacement when the name is a known rename.

What a rule needs, from its expression:
- every selected metric name, except inside `absent()`/`absent_over_time()`
  (absence is what those look for);
- `a or b` where each side selects one name is a fallback (`new or legacy`):
  one of the two is enough;
- Sentinel's own series (`sentinel_*`, `up`, `scrape_*`) come from its
  sources, not from targets, and are not checked; nor are names that are
  present only on some servers by design (OPTIONAL).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sentinel.model import METRIC_NAME, is_stale
from sentinel.promql import nodes as n
from sentinel.rules.loader import RuleGroup
from sentinel.store.memory import Matcher, MemoryStore

# vLLM's own deprecation list (docs/design/metrics.md) and the comments in
# vllm/v1/metrics/loggers.py ("Deprecated in 0.9 - Renamed as ...").
RENAMED: dict[str, str] = {
    "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc",  # 0.9, removed by 0.12
    "vllm:gpu_prefix_cache_queries": "vllm:prefix_cache_queries",  # 0.9
    "vllm:gpu_prefix_cache_hits": "vllm:prefix_cache_hits",  # 0.9
    "vllm:time_per_output_token_seconds": "vllm:inter_token_latency_seconds",  # 0.11
    "vllm:time_in_queue_requests": "vllm:request_queue_time_seconds",
    "vllm:gpu_prefix_cache_hit_rate":
        "vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total",
    "vllm:model_forward_time_milliseconds": "vllm:request_inference_time_seconds",
    "vllm:model_execute_time_milliseconds": "vllm:request_inference_time_seconds",
}
# Removed in V1 with no replacement: KV cache offloading to CPU is not used there.
REMOVED = frozenset({"vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc",
                     "vllm:cpu_prefix_cache_hit_rate"})
# Present only where the feature exists: a server without sleep mode never sleeps.
OPTIONAL = frozenset({"vllm:engine_sleep_state"})
_OWN = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped",
                  "scrape_series_added", "ALERTS", "ALERTS_FOR_STATE"})
_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")
_ABSENT = ("absent", "absent_over_time")


@dataclass(frozen=True, slots=True)
class MissingMetric:
    """A rule selects `metric` and no target exposes it (nor any alternative)."""

    rule: str
    metric: str
    replacement: str = ""
    note: str = ""

    def message(self) -> str:
        """One line for logs and `check config --scrape`."""
        text = f"rule {self.rule} selects {self.metric}, which no target exposes"
        if self.replacement:
            return f"{text}: vLLM renamed it, use {self.replacement}"
        return f"{text}: {self.note}" if self.note else text


def selected_names(expr: n.Expr) -> list[frozenset[str]]:
    """The metric names an expression needs: a list of groups, any one name of a group will do."""
    if isinstance(expr, n.VectorSelector):
        name = next((m.value for m in expr.matchers if m.name == METRIC_NAME and m.op == "="),
                    None)
        return [frozenset({name})] if name else []
    if isinstance(expr, n.MatrixSelector):
        return selected_names(expr.selector)
    if isinstance(expr, n.Call):
        if expr.func in _ABSENT:
            return []
        return [g for a in expr.args for g in selected_names(a)]
    if isinstance(expr, n.Aggregate):
        param = selected_names(expr.param) if expr.param is not None else []
        return selected_names(expr.expr) + param
    if isinstance(expr, n.Binary):
        left, right = selected_names(expr.lhs), selected_names(expr.rhs)
        if expr.op == "or" and len(left) == 1 and len(right) == 1:
            return [left[0] | right[0]]  # a fallback: `new or legacy`
        return left + right
    if isinstance(expr, n.Negate | n.Paren):
        return selected_names(expr.expr)
    return []


def rule_requirements(groups: Iterable[RuleGroup]) -> dict[str, list[frozenset[str]]]:
    """Per alerting rule, the groups of names it needs from targets."""
    out: dict[str, list[frozenset[str]]] = {}
    for g in groups:
        for rule in g.rules:
            needed = []
            for names in selected_names(rule.query):
                kept = frozenset(x for x in names if not _own(x))
                if kept and not kept & OPTIONAL:
                    needed.append(kept)
            out.setdefault(rule.name, []).extend(needed)
    return out


def find_missing(requirements: dict[str, list[frozenset[str]]],
                 present: Callable[[str], bool]) -> list[MissingMetric]:
    """Every (rule, name) whose group has no name present, renames named; sorted."""
    out: set[MissingMetric] = set()
    for rule, needed in requirements.items():
        for names in needed:
            if any(present(x) for x in names):
                continue
            out.update(describe(rule, x) for x in names)
    return sorted(out, key=lambda m: (m.rule, m.metric))


def describe(rule: str, metric: str) -> MissingMetric:
    """A MissingMetric with the replacement of a known rename (suffixes kept)."""
    base, suffix = _split_suffix(metric)
    if base in RENAMED:
        new = RENAMED[base]
        return MissingMetric(rule, metric, new + suffix if " " not in new else new)
    if base in REMOVED:
        return MissingMetric(rule, metric, note="removed in vLLM V1, no replacement")
    return MissingMetric(rule, metric)


def store_has(store: MemoryStore, now_ms: int, window_ms: int) -> Callable[[str], bool]:
    """Whether the store holds a live (not stale) sample of a name within the window."""
    def present(name: str) -> bool:
        has_live = getattr(store, "has_live", None)
        if has_live is not None:  # MemoryStore: counted on its indexes, nothing copied
            return bool(has_live(name, now_ms - window_ms, now_ms))
        for s in store.select([Matcher(METRIC_NAME, "=", name)], now_ms - window_ms, now_ms):
            if any(not is_stale(v) for v in s.vs):
                return True
        return False
    return present


def _own(name: str) -> bool:
    return name.startswith("sentinel_") or name in _OWN


def _split_suffix(name: str) -> tuple[str, str]:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""
