"""promtool's notation for test input series, as Prometheus 2.42 reads it.

`input_series` entries pair a series (`metric{label="value"}`) with values
in the expanding notation, one per evaluation interval:

| item     | expands to                                        |
|----------|---------------------------------------------------|
| `a`      | a (a float: `1`, `-2.5`, `1e3`, `Inf`, `NaN`)     |
| `_`      | one missing sample                                |
| `_xN`    | N missing samples                                 |
| `stale`  | a staleness marker                                |
| `axN`    | N+1 samples of value a                            |
| `a+bxN`  | N+1 samples a, a+b, a+2b, ... (added step by step)|
| `a-bxN`  | N+1 samples a, a-b, a-2b, ...                     |
"""

from __future__ import annotations

import re

import promql_parser as pp

from sentinel.model import METRIC_NAME, STALE_NAN, Labels, labels_of

# No hex: Prometheus's lexer turns it off in series descriptions because
# "0x3" means "0 repeated 3 times" there.
_NUMBER = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[iI]nf|NaN|nan)"
_ITEM = re.compile(
    rf"^(?:(?P<blank>_)(?:x(?P<blank_n>\d+))?"
    rf"|(?P<stale>stale)"
    rf"|(?P<start>{_NUMBER})(?:(?P<step>[-+](?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[iI]nf|NaN))?x(?P<n>\d+))?)$"
)


def _number(text: str) -> float:
    return float(text)


def expand_values(text: str) -> list[float | None]:
    """The values of a promtool `values:` string; None marks a missing sample.

    Staleness markers come out as `sentinel.model.STALE_NAN`. ValueError
    names the first item that does not parse.
    """
    out: list[float | None] = []
    for item in text.split():
        m = _ITEM.match(item)
        if m is None:
            raise ValueError(f"invalid series value {item!r} in {text!r}")
        if m.group("blank"):
            out.extend([None] * int(m.group("blank_n") or 1))
        elif m.group("stale"):
            out.append(STALE_NAN)
        else:
            value = _number(m.group("start"))
            out.append(value)
            if m.group("n") is None:
                continue
            step = _number(m.group("step")) if m.group("step") else 0.0
            for _ in range(int(m.group("n"))):
                value += step  # accumulated, as promtool does: rounding errors included
                out.append(value)
    return out


def parse_series(text: str) -> Labels:
    """The label set of a series written `name{label="value", ...}` (equality matchers only)."""
    try:
        expr = pp.parse(text)
    except ValueError as exc:
        raise ValueError(f"invalid series {text!r}: {exc}") from None
    if not isinstance(expr, pp.VectorSelector) or expr.offset or expr.at:
        raise ValueError(f'invalid series {text!r}: expected name{{label="value", ...}}')
    pairs: dict[str, str] = {}
    if expr.name:
        pairs[METRIC_NAME] = expr.name
    for m in expr.matchers.matchers:
        if str(m.op).rsplit(".", 1)[-1] != "Equal":
            raise ValueError(f"invalid series {text!r}: only = may be used in a series")
        pairs[m.name] = m.value
    return labels_of(pairs)
