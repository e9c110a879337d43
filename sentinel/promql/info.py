"""`info(v [, {data label selector}])`: Prometheus 3's join with info metrics (experimental).

As promql/info.go: each series of `v` gets the data labels of the info series
(`target_info` by default, or those the selector's `__name__` matchers pick)
that share its identifying labels `instance` and `job`. Labels the series
already has are kept; with a selector, only the labels it names are added,
and a series no info series matches is dropped unless every matcher accepts
an empty value. Series of `v` that are info series themselves pass unchanged.
The info series are read as `v`'s first selector reads (its `@` and offset).
"""

from __future__ import annotations

import re
from typing import Protocol

from sentinel.model import METRIC_NAME, InstantSample, Labels, Vector
from sentinel.promql import nodes as n
from sentinel.promql.errors import PromQLError
from sentinel.store.memory import Matcher

TARGET_INFO = "target_info"
# info()'s second argument may match only empty values (`{data=~".*"}`), which the
# parser refuses in a selector: `mark_selectors` gives it this matcher before parsing,
# and the compiler takes it out.
INFO_MARK = "__sentinel_info_selector__"
_INFO_CALL = re.compile(r"\binfo\s*\(")
_BRACE = re.compile(r"\s*\{")
IDENTIFYING = ("instance", "job")


class Evaluator(Protocol):
    """What info() needs of the engine's evaluator."""

    def vector(self, e: n.Expr) -> Vector:
        """Evaluate an instant-vector expression."""
        ...

    def instant(self, sel: n.VectorSelector) -> list[tuple[Labels, int, float]]:
        """Each matching series' newest sample in the lookback window."""
        ...


def info(ev: Evaluator, e: n.Call) -> Vector:
    """The value of `info(...)`."""
    base = ev.vector(e.args[0])
    data: dict[str, list[Matcher]] = {}
    name_matchers: list[Matcher] = []
    if len(e.args) > 1:
        selector = n.unwrap_parens(e.args[1])
        assert isinstance(selector, n.VectorSelector)
        for m in selector.matchers:
            data.setdefault(m.name, []).append(m)
            if m.name == METRIC_NAME:
                name_matchers.append(m)
    else:
        name_matchers = [Matcher(METRIC_NAME, "=", TARGET_INFO)]
    effective = _effective_name_matchers(name_matchers)
    ignored = {s.labels for s in base
               if all(m.matches(_get(s.labels, METRIC_NAME)) for m in effective)}
    infos = _fetch(ev, e.args[0], base, ignored, data)
    data.pop(METRIC_NAME, None)
    return _combine(base, infos, ignored, data)


def mark_selectors(text: str, masked: str) -> str:
    """Each info() call's label selector with INFO_MARK inserted (`masked`: strings blanked)."""
    inserts = []
    for m in _INFO_CALL.finditer(masked):
        depth, comma, i = 1, -1, m.end()
        while i < len(masked) and depth:
            c = masked[i]
            depth += (c in "([{") - (c in ")]}")
            if c == "," and depth == 1:
                comma = i
            i += 1
        if comma >= 0:
            brace = _BRACE.match(masked, comma + 1)
            if brace is not None:
                inserts.append(brace.end())
    for at in reversed(inserts):
        text = text[:at] + f'{INFO_MARK}="1", ' + text[at:]
    return text


def quote_meta(text: str) -> str:
    """Go's regexp.QuoteMeta: every regex metacharacter escaped."""
    return "".join("\\" + c if c in "\\.+*?()|[]{}^$" else c for c in text)


def _get(labels: Labels, name: str) -> str:
    for k, v in labels:
        if k == name:
            return v
    return ""


def _effective_name_matchers(matchers: list[Matcher]) -> list[Matcher]:
    if any(m.op in ("=", "=~") for m in matchers):
        return matchers
    if matchers:
        return [Matcher(METRIC_NAME, "=~", ".+_info"), *matchers]
    return [Matcher(METRIC_NAME, "=", TARGET_INFO)]


def _first_selector(e: n.Expr) -> n.VectorSelector | None:
    """The first vector selector of the expression, depth first, as Prometheus finds it."""
    e = n.unwrap_parens(e)
    if isinstance(e, n.VectorSelector):
        return e
    if isinstance(e, n.MatrixSelector):
        return e.selector
    children: tuple[n.Expr | None, ...] = ()
    if isinstance(e, n.Call):
        children = e.args
    elif isinstance(e, n.Aggregate):
        children = (e.param, e.expr)
    elif isinstance(e, n.Binary):
        children = (e.lhs, e.rhs)
    elif isinstance(e, n.Negate | n.Subquery):
        children = (e.expr,)
    for child in children:
        found = _first_selector(child) if child is not None else None
        if found is not None:
            return found
    return None


def _fetch(ev: Evaluator, arg: n.Expr, base: Vector, ignored: set[Labels],
           data: dict[str, list[Matcher]]) -> list[tuple[Labels, int]]:
    """The info series (labels, sample time) for the base series' identifying labels."""
    values: dict[str, set[str]] = {}
    for s in base:
        if s.labels in ignored:
            continue
        for name in IDENTIFYING:
            v = _get(s.labels, name)
            if v:
                values.setdefault(name, set()).add(v)
    if not values:
        return []
    matchers = [Matcher(name, "=~", "|".join(quote_meta(v) for v in sorted(vs)))
                for name, vs in values.items()]
    names: list[Matcher] = []
    for ms in data.values():
        for m in ms:
            (names if m.name == METRIC_NAME else matchers).append(m)
    matchers += _effective_name_matchers(names)
    first = _first_selector(arg)
    at = first.at if first is not None else None
    offset = first.offset_ms if first is not None else 0
    found = ev.instant(n.VectorSelector(tuple(matchers), offset, at))
    return [(labels, t) for labels, t, _ in found]


def _signature(name: str, labels: Labels) -> Labels:
    return ((METRIC_NAME, name), *((k, v) for k, v in labels if k in IDENTIFYING))


def _combine(base: Vector, infos: list[tuple[Labels, int]], ignored: set[Labels],
             data: dict[str, list[Matcher]]) -> Vector:
    names = sorted({_get(labels, METRIC_NAME) for labels, _ in infos})
    by_sig: dict[Labels, tuple[Labels, int]] = {}
    for labels, t in infos:
        sig = _signature(_get(labels, METRIC_NAME), labels)
        have = by_sig.get(sig)
        if have is not None and have[1] == t:
            raise PromQLError(f"found duplicate series for info metric: existing "
                              f"{dict(have[0])} @ {have[1]}, new {dict(labels)} @ {t}")
        if have is None or have[1] < t:
            by_sig[sig] = (labels, t)
    out: Vector = []
    for s in base:
        if s.labels in ignored:
            out.append(s)
            continue
        present = dict(s.labels)
        added: dict[str, str] = {}
        seen = False
        for name in names:
            match = by_sig.get(_signature(name, s.labels))
            if match is None:
                continue
            seen = True
            for k, v in match[0]:
                if k == METRIC_NAME or (data and k not in data):
                    continue
                if added.get(k, v) != v:
                    raise PromQLError(f"conflicting label: {k}")
                if k not in present:
                    added[k] = v
        if not seen and not all(m.matches("") for ms in data.values() for m in ms):
            continue
        out.append(InstantSample(tuple(sorted({**present, **added}.items())), s.value))
    return out
