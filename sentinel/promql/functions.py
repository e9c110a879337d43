"""Functions over instant vectors and scalars (the range-vector ones are in rangefuncs)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from sentinel.model import METRIC_NAME, InstantSample, Labels, Vector, label_value, labels_of
from sentinel.promql import floatops as f
from sentinel.promql.errors import PromQLError
from sentinel.promql.histogram import bucket_quantile
from sentinel.promql.mathfuncs import TRIG
from sentinel.re2match import GoRegex, RegexError, anchored

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_TEMPLATE = re.compile(r"\$(\$|\{(\w+)\}|(\w+))")


# Labels that describe the metric rather than the series; an operation that changes the
# metric drops them all (Prometheus 3's schema.IsMetadataLabel: name, type and unit).
METADATA_LABELS = frozenset({METRIC_NAME, "__type__", "__unit__"})


def drop_name(labels: Labels) -> Labels:
    """The label set without `__name__` (nor Prometheus 3's `__type__` and `__unit__`)."""
    if labels and labels[0][0] == METRIC_NAME:  # sorted labels: it is usually first
        if len(labels) == 1 or labels[1][0][:2] != "__":
            return labels[1:]
    if labels and any(k in METADATA_LABELS for k, _ in labels):
        return tuple(kv for kv in labels if kv[0] not in METADATA_LABELS)
    return labels


def go_max(a: float, b: float) -> float:
    """Go's math.Max (NaN wins over finite numbers, +Inf over NaN)."""
    if a == math.inf or b == math.inf:
        return math.inf
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == 0 and b == 0:
        return b if math.copysign(1, a) < 0 else a
    return a if a > b else b


def go_min(a: float, b: float) -> float:
    """Go's math.Min (NaN wins over finite numbers, -Inf over NaN)."""
    if a == -math.inf or b == -math.inf:
        return -math.inf
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == 0 and b == 0:
        return a if math.copysign(1, a) < 0 else b
    return a if a < b else b


def _sgn(v: float) -> float:
    if v < 0:
        return -1.0
    if v > 0:
        return 1.0
    return v


SIMPLE: dict[str, Callable[[float], float]] = {
    "abs": abs,
    "ceil": f.ceil,
    "floor": f.floor,
    "exp": f.exp,
    "sqrt": f.sqrt,
    "ln": f.log,
    "log2": lambda v: f.log(v, 2),
    "log10": lambda v: f.log(v, 10),
    "sgn": _sgn,
    **TRIG,
}


def simple(name: str, vec: Vector) -> Vector:
    """A one-argument math function applied to each sample; drops the metric name."""
    fn = SIMPLE[name]
    return [InstantSample(drop_name(s.labels), fn(s.value)) for s in vec]


def round_(vec: Vector, to_nearest: float = 1.0) -> Vector:
    """round(v, to_nearest): ties round up."""
    inverse = f.div(1.0, to_nearest)
    return [
        InstantSample(drop_name(s.labels), f.div(f.floor(s.value * inverse + 0.5), inverse))
        for s in vec
    ]


def clamp(vec: Vector, lo: float, hi: float) -> Vector:
    """Values limited to [lo, hi]; empty when hi < lo."""
    if hi < lo:
        return []
    return [InstantSample(drop_name(s.labels), go_max(lo, go_min(hi, s.value))) for s in vec]


def clamp_min(vec: Vector, lo: float) -> Vector:
    """Values raised to at least lo."""
    return [InstantSample(drop_name(s.labels), go_max(lo, s.value)) for s in vec]


def clamp_max(vec: Vector, hi: float) -> Vector:
    """Values lowered to at most hi."""
    return [InstantSample(drop_name(s.labels), go_min(hi, s.value)) for s in vec]


def _sort_key(s: InstantSample) -> tuple[bool, float]:
    return (math.isnan(s.value), 0.0 if math.isnan(s.value) else s.value)


def sort(vec: Vector) -> Vector:
    """Ascending by value, NaN last."""
    return sorted(vec, key=_sort_key)


def sort_desc(vec: Vector) -> Vector:
    """Descending by value, NaN last."""
    nans = [s for s in vec if math.isnan(s.value)]
    rest = sorted((s for s in vec if not math.isnan(s.value)), key=lambda s: -s.value)
    return rest + nans


def _expand(template: str, rx: GoRegex, groups: list[str | None]) -> str:
    """Go's regexp.Expand: $1, ${1}, $name, ${name}, $$; unknown groups expand to ''."""

    def one(m: re.Match[str]) -> str:
        if m.group(1) == "$":
            return "$"
        name = m.group(2) or m.group(3)
        if name.isascii() and name.isdigit():
            if len(name) > 1 and name[0] == "0":
                return ""
            num = int(name)
            if num >= len(groups):
                return ""
            return groups[num] or ""
        index = rx.group_index.get(name)
        if index is None:
            return ""
        return groups[index] or ""

    return _TEMPLATE.sub(one, template)


def label_replace_regex(regex: str) -> GoRegex:
    """label_replace()'s regex, anchored as in Prometheus 3 (`.` matches a newline too);
    PromQLError when RE2 refuses it."""
    try:
        return anchored(regex, dotall=True)
    except RegexError as e:
        raise PromQLError(f"invalid regular expression in label_replace(): {regex}: {e}") from None


def label_replace(vec: Vector, dst: str, repl: str, src: str, regex: str) -> Vector:
    """Set `dst` from `repl` expanded against `src` when the anchored `regex` matches."""
    rx = label_replace_regex(regex)
    if not _LABEL_NAME.fullmatch(dst):
        raise PromQLError(f"invalid destination label name in label_replace(): {dst}")
    out = []
    for s in vec:
        groups = rx.groups_of(label_value(s.labels, src))
        if groups is None:
            out.append(s)
            continue
        res = _expand(repl, rx, groups)
        rest = [kv for kv in s.labels if kv[0] != dst]
        out.append(InstantSample(labels_of([*rest, (dst, res)]), s.value))
    return out


def label_join(vec: Vector, dst: str, sep: str, *srcs: str) -> Vector:
    """Set `dst` to the values of `srcs` joined by `sep` (removed when empty)."""
    for name in (*srcs, dst):
        if not _LABEL_NAME.fullmatch(name):
            raise PromQLError(f"invalid label name in label_join(): {name}")
    out = []
    for s in vec:
        joined = sep.join(label_value(s.labels, name) for name in srcs)
        rest = [kv for kv in s.labels if kv[0] != dst]
        out.append(InstantSample(labels_of([*rest, (dst, joined)]), s.value))
    return out


def parse_bound(text: str) -> float | None:
    """A bucket's `le` as a float, None when it is not one (Go's ParseFloat refuses "_")."""
    try:
        return float(text) if "_" not in text else None
    except ValueError:
        return None


def histogram_quantile(q: float, vec: Vector, v3: bool = True) -> Vector:
    """φ-quantile of classic histograms: series grouped by all labels but `le`."""
    return [InstantSample(labels, bucket_quantile(q, b, v3)) for labels, b in classic_groups(vec)]


def classic_groups(vec: Vector) -> list[tuple[Labels, list[tuple[float, float]]]]:
    """Classic histograms' buckets: (output labels, [(bound, count)]) per series but `le`;
    a bucket whose `le` is not a number is left out."""
    groups: dict[Labels, tuple[Labels, list[tuple[float, float]]]] = {}
    bounds: dict[str, float | None] = {}  # a fleet's histograms share a few `le` values
    for s in vec:
        le = label_value(s.labels, "le")
        if le in bounds:
            bound = bounds[le]
        else:
            bound = bounds[le] = parse_bound(le)
        if bound is None:
            continue
        # The metric name stays in the key so two histograms with the same
        # labels are not merged (prometheus#9910), though it leaves the output.
        key = tuple([kv for kv in s.labels if kv[0] != "le"])
        group = groups.get(key)
        if group is None:
            group = groups[key] = (drop_name(key), [])
        group[1].append((bound, s.value))
    return list(groups.values())
