"""Prometheus 3's experimental PromQL, behind the feature flags Prometheus uses.

Prometheus enables these with `--enable-feature=<name>`; Sentinel's compiler
accepts them only when asked for by the same names (`compile_expr(text,
features)`, `Engine(store, features=...)`). Everything else of Prometheus 3's
PromQL is on by default.
"""

from __future__ import annotations

EXPERIMENTAL_FUNCTIONS = "promql-experimental-functions"
DURATION_EXPR = "promql-duration-expr"
FILL_MODIFIERS = "promql-binop-fill-modifiers"
EXTENDED_RANGE = "promql-extended-range-selectors"

ALL = frozenset({EXPERIMENTAL_FUNCTIONS, DURATION_EXPR, FILL_MODIFIERS, EXTENDED_RANGE})
NONE: frozenset[str] = frozenset()

# Functions and aggregations Prometheus 3 marks experimental (promql/parser/functions.go).
# double_exponential_smoothing is one, but Sentinel always accepted it (and holt_winters,
# its 2.x name): it stays available without the flag.
EXPERIMENTAL_FUNCTION_NAMES = frozenset({
    "sort_by_label", "sort_by_label_desc", "mad_over_time", "ts_of_first_over_time",
    "ts_of_last_over_time", "ts_of_min_over_time", "ts_of_max_over_time",
    "limitk", "limit_ratio", "info", "histogram_quantiles", "start_timestamp",
    "start", "end", "range", "step", "min_of", "max_of",
})


def check(features: frozenset[str]) -> frozenset[str]:
    """The set itself when every name is known; ValueError naming the first unknown one."""
    unknown = sorted(features - ALL)
    if unknown:
        raise ValueError(f"unknown PromQL feature {unknown[0]!r} (known: {', '.join(sorted(ALL))})")
    return features
