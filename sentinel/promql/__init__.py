"""PromQL: parse with promql-parser, check the supported subset, evaluate over a store.

    from sentinel.promql import Engine, compile_expr, PromQLError
    Engine(store).query('sum by (target) (rate(x_total[5m]))', at_ms=now_ms)

Prometheus 3's semantics by default (left-open windows, its arithmetic); with
`Engine(store, semantics=2)` results agree bit for bit with Prometheus 2.42
(checked against promtool in tests/test_promql_oracle.py). Experimental PromQL
(duration expressions, fill modifiers, experimental functions) only with
`Engine(store, features=...)` (sentinel/promql/features.py). Instant queries;
a range query is one per step (`start_ms`, `end_ms`, `step_ms`).
See docs/reference/promql.md for the table of what is supported.

Supported subset:

| family          | supported                                                       |
|-----------------|-----------------------------------------------------------------|
| selectors       | `m{l="v"}`, `!=`, `=~`, `!~` (`__name__` too), `[5m]` ranges,   |
|                 | `offset` (negative too), `@ t`, `@ start()`, `@ end()`;         |
|                 | 5m lookback; staleness markers                                  |
| subqueries      | `e[10m:1m]`, `e[10m:]`, with offset and `@`; aligned steps      |
| literals        | numbers (`1`, `1e3`, `Inf`, `NaN`), strings as arguments;       |
|                 | parentheses; unary `-`                                          |
| arithmetic      | `+ - * / % ^ atan2`: scalar/scalar, vector/scalar, vector/vector|
| comparison      | `== != > < >= <=`, filtering or with `bool`                     |
| vector matching | one-to-one, `on`, `ignoring`, `group_left`, `group_right`       |
| set operators   | `and`, `or`, `unless` (with `on`/`ignoring`)                    |
| aggregations    | `sum avg min max count group stddev stdvar topk bottomk`        |
|                 | `quantile count_values`, with `by` / `without`                  |
| counters        | `rate irate increase resets`                                    |
| gauges          | `delta idelta changes deriv predict_linear holt_winters`        |
|                 | (= `double_exponential_smoothing`)                              |
| over time       | `avg_ min_ max_ sum_ count_ last_ present_ quantile_`           |
|                 | `stddev_ stdvar_over_time`                                      |
| histograms      | `histogram_quantile` over classic `le` buckets                  |
| absence         | `absent`, `absent_over_time`                                    |
| math            | `abs ceil floor round clamp clamp_min clamp_max exp sqrt ln`    |
|                 | `log2 log10 sgn`; trigonometry (Go's algorithms) `deg rad pi`   |
| dates           | `day_of_month day_of_week day_of_year days_in_month hour minute`|
|                 | `month year`                                                    |
| labels          | `label_replace`, `label_join`                                   |
| other           | `time timestamp vector scalar sort sort_desc`                   |
| Prometheus 3    | first_over_time, histogram_fraction; experimental: mad_over_time|
|                 | ts_of_*_over_time, sort_by_label(_desc), histogram_quantiles,   |
|                 | start() end() range() step() min_of max_of, fill modifiers,     |
|                 | duration expressions                                            |
|                 | limitk limit_ratio info, anchored/smoothed ranges (experimental)|
| NOT supported   | native histograms, delayed name removal, start timestamps:      |
|                 | rejected when compiled, with the position                       |

Regexes (`=~`, `!~`, `label_replace`) are Go's RE2, anchored `^(?:re)$`, matched
in linear time (`sentinel.re2match`); one RE2 refuses is a compile error at the
matcher's position, worded as promtool words it.
"""

from sentinel.promql.compile import compile_expr
from sentinel.promql.engine import DEFAULT_LOOKBACK_MS, Engine, max_lookback_ms
from sentinel.promql.errors import PromQLError
from sentinel.promql.floatops import format_float
from sentinel.promql.nodes import Expr
from sentinel.promql.series_notation import expand_values, parse_series

__all__ = [
    "DEFAULT_LOOKBACK_MS",
    "Engine",
    "Expr",
    "PromQLError",
    "compile_expr",
    "expand_values",
    "format_float",
    "max_lookback_ms",
    "parse_series",
]
