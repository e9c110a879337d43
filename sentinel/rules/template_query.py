"""Template functions that query, and the rest of Prometheus 2.42's template/template.go.

`query` runs PromQL over the same store at the alert's evaluation time and
gives Go's `queryResult`: samples with `.Labels` (a map, `__name__`
included) and `.Value`. `first`, `label`, `value`, `strvalue` and
`sortByLabel` take those samples apart; `toTime` gives a time whose
`.Unix`, `.UnixMilli`, `.UTC`, ... methods templates may call. The Go
builtins `html`, `js` and `urlquery` escape as text/template does.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

from sentinel.config.durations import parse_duration
from sentinel.rules.gofmt import format_float, go_sprint
from sentinel.rules.template_funcs import FuncError, _float, _string

QueryRunner = Callable[[str], Any]  # PromQL text → Vector | float, at the alert's time


@dataclass(slots=True)
class GoSample:
    """Prometheus's template `*sample`: `.Labels` and `.Value`."""

    Labels: dict[str, str]
    Value: float

    def go_field(self, name: str) -> Any:
        """The value of field `name`; AttributeError when the type has none."""
        if name == "Labels":
            return self.Labels
        if name == "Value":
            return self.Value
        raise AttributeError(name)

    def __str__(self) -> str:
        return self.go_string()

    def go_string(self) -> str:
        """fmt's %v of a *sample."""
        labels = " ".join(f"{k}:{self.Labels[k]}" for k in sorted(self.Labels))
        return f"&{{map[{labels}] {format_float(self.Value)}}}"

    @staticmethod
    def go_type_name() -> str:
        """Go's %T of the value."""
        return "*template.sample"


class GoTime:
    """A `*time.Time` in UTC with millisecond precision (as Prometheus's floatToTime)."""

    __slots__ = ("ms",)

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def _dt(self) -> dt.datetime:
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=self.ms)

    def go_string(self) -> str:
        """time.Time.String(): "2006-01-02 15:04:05.999999999 +0000 UTC"."""
        t = self._dt()
        frac = f".{self.ms % 1000:03d}".rstrip("0") if self.ms % 1000 else ""
        return t.strftime("%Y-%m-%d %H:%M:%S") + frac + " +0000 UTC"

    @staticmethod
    def go_type_name() -> str:
        """Go's %T of the value."""
        return "*time.Time"

    def __str__(self) -> str:
        return self.go_string()

    def go_field(self, name: str) -> Any:
        """The result of a time.Time method that takes no argument (Go calls it at once)."""
        d = self._dt()
        methods: dict[str, Callable[[], Any]] = {
            "Unix": lambda: math.floor(self.ms / 1000),
            "UnixMilli": lambda: self.ms,
            "UnixMicro": lambda: self.ms * 1000,
            "UnixNano": lambda: self.ms * 1_000_000,
            "UTC": lambda: self,
            "Year": lambda: d.year,
            "YearDay": lambda: d.timetuple().tm_yday,
            "Day": lambda: d.day,
            "Hour": lambda: d.hour,
            "Minute": lambda: d.minute,
            "Second": lambda: d.second,
            "Nanosecond": lambda: d.microsecond * 1000,
            "Month": lambda: d.strftime("%B"),
            "Weekday": lambda: d.strftime("%A"),
            "String": self.go_string,
        }
        if name not in methods:
            raise AttributeError(name)
        return methods[name]()


def query_result(value: Any) -> list[GoSample]:
    """A PromQL result as template samples (a scalar is one sample with no labels)."""
    if isinstance(value, int | float):
        return [GoSample({}, float(value))]
    return [GoSample(dict(s.labels), s.value) for s in value]


def _sample(v: Any) -> GoSample:
    if not isinstance(v, GoSample):
        raise FuncError(f"wrong type for value; expected *template.sample; got {_type(v)}",
                        wrapped=False)
    return v


def _type(v: Any) -> str:
    from sentinel.rules.gofmt import go_type

    if hasattr(v, "go_type_name"):
        return str(v.go_type_name())
    return go_type(v)


def first(v: Any) -> GoSample:
    """The first sample of a query result."""
    if not isinstance(v, list):
        raise FuncError(f"wrong type for value; expected template.queryResult; got {_type(v)}",
                        wrapped=False)
    if not v:
        raise FuncError("first() called on vector with no elements")
    return v[0]  # type: ignore[no-any-return]


def label(name: Any, s: Any) -> str:
    """A label of a sample ("" when absent)."""
    return _sample(s).Labels.get(_string(name), "")


def value(s: Any) -> float:
    """A sample's value."""
    return _sample(s).Value


def strvalue(s: Any) -> str:
    """A sample's `__value__` label (for string results)."""
    return _sample(s).Labels.get("__value__", "")


def args(*values: Any) -> dict[str, Any]:
    """A map arg0, arg1, ... of the arguments (to pass several values to a template)."""
    return {f"arg{i}": v for i, v in enumerate(values)}


def sort_by_label(name: Any, v: Any) -> list[GoSample]:
    """The samples sorted by one label's value (stable)."""
    key = _string(name)
    if not isinstance(v, list):
        raise FuncError(f"wrong type for value; expected template.queryResult; got {_type(v)}",
                        wrapped=False)
    v.sort(key=lambda s: s.Labels.get(key, "").encode())
    return v  # type: ignore[no-any-return]


def _link(expr: Any, tab: int) -> str:
    return f"/graph?g0.expr={quote_plus(_string(expr), safe='')}&g0.tab={tab}"


def graph_link(expr: Any) -> str:
    """Relative link to the graph view of an expression (strutil.GraphLinkForExpression)."""
    return _link(expr, 0)


def table_link(expr: Any) -> str:
    """Relative link to the table view of an expression (strutil.TableLinkForExpression)."""
    return _link(expr, 1)


def _split_host_port(text: str) -> tuple[str, str] | None:
    m = re.fullmatch(r"\[([^\]]*)\]:([^:]*)|([^:\[\]]*):([^:]*)", text)
    if not m:
        return None
    return (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))


def _is_ip(host: str) -> bool:
    if "%" in host:
        return False  # net.ParseIP takes no zone
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def strip_domain(value: Any) -> str:
    """The first label of a host name, port kept; IP addresses unchanged."""
    host_port = _string(value)
    split = _split_host_port(host_port)
    host, port = split if split is not None else (host_port, "")
    if _is_ip(host):
        return host_port
    host = host.split(".")[0]
    if port:
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return host


def to_time(value: Any) -> GoTime:
    """Unix seconds as a time (millisecond precision)."""
    v = _float(value)
    if math.isnan(v) or math.isinf(v):
        raise FuncError("value is NaN or Inf")
    nanos = v * 1e9
    if not -(2**63) <= nanos < 2**63:
        raise FuncError(f"{go_sprint(v)} cannot be represented as a nanoseconds timestamp "
                        "since it overflows int64")
    return GoTime(int(int(nanos) / 1_000_000))


def parse_duration_s(text: Any) -> float:
    """A Prometheus duration in seconds."""
    s = _string(text)
    try:
        if s != s.strip():
            raise ValueError(s)
        return parse_duration(s) / 1000
    except ValueError:
        raise FuncError(f'not a valid duration string: "{s}"') from None


def html_escape(*values: Any) -> str:
    """text/template's html: HTMLEscapeString of the printed arguments."""
    text = values[0] if len(values) == 1 and isinstance(values[0], str) else go_sprint(*values)
    table = {"&": "&amp;", "'": "&#39;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "\0": "\ufffd"}
    return "".join(table.get(c, c) for c in text)


def js_escape(*values: Any) -> str:
    """text/template's js: JSEscapeString of the printed arguments."""
    text = values[0] if len(values) == 1 and isinstance(values[0], str) else go_sprint(*values)
    special = {"\\": "\\\\", "'": "\\'", '"': '\\"', "<": "\\u003C", ">": "\\u003E",
               "&": "\\u0026", "=": "\\u003D"}
    out = []
    for c in text:
        if c in special:
            out.append(special[c])
        elif c.isprintable():
            out.append(c)
        else:
            out.append(f"\\u{ord(c):04X}")
    return "".join(out)


def url_query(*values: Any) -> str:
    """text/template's urlquery: QueryEscape of the printed arguments."""
    text = values[0] if len(values) == 1 and isinstance(values[0], str) else go_sprint(*values)
    return quote_plus(text, safe="")


QUERY_FUNCS: dict[str, Callable[..., Any]] = {
    "first": first,
    "label": label,
    "value": value,
    "strvalue": strvalue,
    "args": args,
    "safeHtml": lambda s: _string(s),
    "graphLink": graph_link,
    "tableLink": table_link,
    "sortByLabel": sort_by_label,
    "stripDomain": strip_domain,
    "toTime": to_time,
    "parseDuration": parse_duration_s,
    "urlQueryEscape": lambda s: quote_plus(_string(s), safe=""),  # Prometheus 2.43+
    "html": html_escape,
    "js": js_escape,
    "urlquery": url_query,
}
