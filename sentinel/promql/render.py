"""Sentinel's syntax tree back to PromQL text.

A rule split between the embedded store and a remote backend
(sentinel/rules/split.py) sends the backend the text of a part of a compiled
expression. The tree came from a parse, so printing it node for node (with
the parentheses the parse kept) reads back as the same tree; the tests check
that round trip over the shipped rules.
"""

from __future__ import annotations

import json
import math
import re

from sentinel.model import METRIC_NAME
from sentinel.promql import nodes as n


def render(e: n.Expr) -> str:
    """The PromQL text of a compiled expression."""
    if isinstance(e, n.NumberLiteral):
        return _number(e.value)
    if isinstance(e, n.StringLiteral):
        return _quote(e.value)
    if isinstance(e, n.Paren):
        return f"({render(e.expr)})"
    if isinstance(e, n.Negate):
        return f"-{render(e.expr)}"
    if isinstance(e, n.VectorSelector):
        return _selector(e)
    if isinstance(e, n.MatrixSelector):
        sel = e.selector
        plain = n.VectorSelector(sel.matchers)
        return (f"{_selector(plain)}[{_duration(e.range_ms)}]"
                f"{_modifiers(sel.offset_ms, sel.at)}{_extend(sel)}")
    if isinstance(e, n.Subquery):
        step = _duration(e.step_ms) if e.step_ms else ""
        return f"{render(e.expr)}[{_duration(e.range_ms)}:{step}]{_modifiers(e.offset_ms, e.at)}"
    if isinstance(e, n.Call):
        return f"{e.func}({', '.join(render(a) for a in e.args)})"
    if isinstance(e, n.Aggregate):
        return _aggregate(e)
    return _binary(e)


def _number(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Inf" if v > 0 else "-Inf"
    # A negative literal is printed as the parse produced it (`x > bool -1`).
    return repr(v)


def _quote(s: str) -> str:
    # A JSON string is a valid Go (PromQL) double-quoted string with the same value.
    return json.dumps(s, ensure_ascii=False)


def _duration(ms: int) -> str:
    return f"{ms}ms" if ms % 1000 else f"{ms // 1000}s"


def _modifiers(offset_ms: int, at: n.At) -> str:
    out = ""
    if offset_ms:
        out += f" offset {'-' if offset_ms < 0 else ''}{_duration(abs(offset_ms))}"
    if at == n.AT_START:
        out += " @ start()"
    elif at == n.AT_END:
        out += " @ end()"
    elif at is not None:
        out += f" @ {int(at) / 1000:.3f}"
    return out


def _selector(e: n.VectorSelector) -> str:
    name = next((m.value for m in e.matchers if m.name == METRIC_NAME and m.op == "="), None)
    rest = [m for m in e.matchers if not (m.name == METRIC_NAME and m.op == "=")]
    if name is not None and not _LEGACY_NAME.fullmatch(name):
        # A UTF-8 name (Prometheus 3) is written quoted, first inside the braces.
        inner = ", ".join([_quote(name), *(f"{_label(m.name)}{m.op}{_quote(m.value)}"
                                            for m in rest)])
        text = f"{{{inner}}}"
    elif name is None or rest:
        # A name that is not an exact match is written as a matcher; an exact one in front.
        inner = ", ".join(f"{_label(m.name)}{m.op}{_quote(m.value)}" for m in rest)
        text = f"{name or ''}{{{inner}}}"
    else:
        text = name
    return text + _modifiers(e.offset_ms, e.at) + _extend(e)


_LEGACY_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LEGACY_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _label(name: str) -> str:
    return name if _LEGACY_LABEL.fullmatch(name) else _quote(name)


def _extend(sel: n.VectorSelector) -> str:
    return f" {sel.extend}" if sel.extend else ""


def _aggregate(e: n.Aggregate) -> str:
    grouping = ""
    if e.grouping or e.without:
        grouping = f" {'without' if e.without else 'by'} ({', '.join(e.grouping)})"
    param = f"{render(e.param)}, " if e.param is not None else ""
    return f"{e.op}{grouping} ({param}{render(e.expr)})"


def _binary(e: n.Binary) -> str:
    m = e.matching
    mod = " bool" if e.return_bool else ""
    set_op = e.op in ("and", "or", "unless")
    if m.on or m.labels:
        mod += f" {'on' if m.on else 'ignoring'} ({', '.join(m.labels)})"
    if m.card == "many-to-one" and not set_op:
        mod += f" group_left ({', '.join(m.include)})"
    elif m.card == "one-to-many" and not set_op:
        mod += f" group_right ({', '.join(m.include)})"
    if m.fill_lhs is not None:
        mod += f" fill_left({_number(m.fill_lhs)})"
    if m.fill_rhs is not None:
        mod += f" fill_right({_number(m.fill_rhs)})"
    return f"{render(e.lhs)} {e.op}{mod} {render(e.rhs)}"
