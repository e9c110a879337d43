"""The functions alert templates may call: Go's builtins and Prometheus's (template/template.go).

Each function takes template values and returns one; `FuncError` carries
Go's message so an expansion failure reads as it would in Prometheus.
Output formats (humanize's 4 significant digits, `%.4g` of ±Inf as "+Inf")
were checked against promtool 2.42.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from sentinel.re2match import GoRegex, RegexError, unanchored
from sentinel.rules.gofmt import go_sprint, go_sprintf, go_sprintln, go_type


class FuncError(Exception):
    """A template function failed; `wrapped` says whether Go prefixes "error calling NAME: "."""

    def __init__(self, message: str, wrapped: bool = True) -> None:
        super().__init__(message)
        self.wrapped = wrapped


def _g4(v: float) -> str:
    """Go's `%.4g` (Python's, except for the spelling of infinities and NaN)."""
    return go_sprintf("%.4g", v)


def _float(v: Any) -> float:
    """Prometheus's convertToFloat: numbers and numeric strings."""
    if isinstance(v, bool) or v is None or not isinstance(v, int | float | str):
        raise FuncError(f"can't convert {go_type(v)} to float")
    if isinstance(v, str):
        try:
            return float(v.replace("_", "")) if v.strip() == v else float("x")
        except ValueError:
            raise FuncError(f'strconv.ParseFloat: parsing "{v}": invalid syntax') from None
    return float(v)


def _string(v: Any) -> str:
    if not isinstance(v, str):
        raise FuncError(f"wrong type for value; expected string; got {go_type(v)}", wrapped=False)
    return v


def humanize(value: Any) -> str:
    """Metric prefixes (k, M, ... and m, u, n, ...), 4 significant digits."""
    v = _float(value)
    if v == 0 or math.isnan(v) or math.isinf(v):
        return _g4(v)
    if abs(v) >= 1:
        prefix = ""
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(v) < 1000:
                break
            prefix, v = p, v / 1000
        return _g4(v) + prefix
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix, v = p, v * 1000
    return _g4(v) + prefix


def humanize1024(value: Any) -> str:
    """Binary prefixes (ki, Mi, ...), 4 significant digits."""
    v = _float(value)
    if abs(v) <= 1 or math.isnan(v) or math.isinf(v):
        return _g4(v)
    prefix = ""
    for p in ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"):
        if abs(v) < 1024:
            break
        prefix, v = p, v / 1024
    return _g4(v) + prefix


def _trunc_div(a: int, b: int) -> int:
    return -(-a // b) if a < 0 else a // b


def _trunc_rem(a: int, b: int) -> int:
    return a - b * _trunc_div(a, b)


def humanize_duration(value: Any) -> str:
    """Seconds as "1d 2h 3m 4s", or "930ms" below one second."""
    v = _float(value)
    if math.isnan(v) or math.isinf(v):
        return _g4(v)
    if v == 0:
        return _g4(v) + "s"
    if abs(v) >= 1:
        sign = "-" if v < 0 else ""
        v = abs(v)
        # Go's int64(v): out-of-range floats become MinInt64 on amd64; / and % truncate.
        whole = int(v) if v < 2**63 else -(2**63)
        seconds, minutes = _trunc_rem(whole, 60), _trunc_rem(_trunc_div(whole, 60), 60)
        hours, days = _trunc_rem(_trunc_div(whole, 3600), 24), _trunc_div(whole, 86400)
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return f"{sign}{_g4(v)}s"
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix, v = p, v * 1000
    return f"{_g4(v)}{prefix}s"


def humanize_percentage(value: Any) -> str:
    """A ratio as a percentage, 4 significant digits."""
    return _g4(_float(value) * 100) + "%"


def humanize_timestamp(value: Any) -> str:
    """Unix seconds as Go prints a UTC time (millisecond precision, as model.Time)."""
    v = _float(value)
    if math.isnan(v) or math.isinf(v):
        return _g4(v)
    nanos = v * 1e9
    if not -(2**63) <= nanos < 2**63:
        raise FuncError(
            f"{go_sprint(v)} cannot be represented as a nanoseconds timestamp since it "
            "overflows int64"
        )
    ms = int(int(nanos) / 1_000_000)  # Go's integer division truncates toward zero
    t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
    frac = f".{t.microsecond // 1000:03d}".rstrip("0").rstrip(".") if t.microsecond else ""
    return t.strftime("%Y-%m-%d %H:%M:%S") + frac + " +0000 UTC"


def title(value: Any) -> str:
    """strings.Title: upper-case the first letter of each word."""
    s = _string(value)
    out, prev_sep = [], True
    for ch in s:
        out.append(ch.upper() if prev_sep else ch)
        if ch.isascii():
            prev_sep = not (ch.isalnum() or ch == "_")
        else:
            prev_sep = ch.isspace()
    return "".join(out)


def strip_port(value: Any) -> str:
    """The host of "host:port" (net.SplitHostPort), or the input unchanged."""
    s = _string(value)
    m = re.fullmatch(r"\[([^\]]*)\]:([^:]*)|([^:\[\]]*):([^:]*)", s)
    if not m:
        return s
    return m.group(1) if m.group(1) is not None else m.group(3)


def _go_regex(pattern: str) -> GoRegex:
    """Go's regexp.Compile (RE2 syntax, unanchored), as Prometheus's template functions use it."""
    try:
        return unanchored(pattern)
    except RegexError as e:
        raise FuncError(str(e)) from None


def match(pattern: Any, text: Any) -> bool:
    """regexp.MatchString: whether the (unanchored) pattern occurs in text."""
    return _go_regex(_string(pattern)).matches(_string(text))


_GO_GROUP = re.compile(r"\$(?:\$|\{(\w+)\}|(\w+))")


def _expand(template: str, rx: GoRegex, groups: list[str | None]) -> str:
    """Go's Regexp.Expand: `$1`, `${name}`, `$$`; a group that does not exist is ''."""

    def group(g: re.Match[str]) -> str:
        if g.group(0) == "$$":
            return "$"
        name = g.group(1) or g.group(2)
        index = int(name) if name.isascii() and name.isdigit() else rx.group_index.get(name)
        if index is None or index >= len(groups):
            return ""
        return groups[index] or ""

    return _GO_GROUP.sub(group, template)


def re_replace_all(pattern: Any, repl: Any, text: Any) -> str:
    """regexp.ReplaceAllString with Go's `$1` / `${name}` expansion."""
    rx = _go_regex(_string(pattern))
    template, src = _string(repl), _string(text)
    out, last = [], 0
    for groups, start, end in rx.find_all(src):
        out += [src[last:start], _expand(template, rx, groups)]
        last = end
    out.append(src[last:])
    return "".join(out)


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    return "invalid" if v is None else "other"


def _eq(a: Any, *others: Any) -> bool:
    if not others:
        raise FuncError("missing argument for comparison")
    for b in others:
        ka, kb = _kind(a), _kind(b)
        if ka == "other" or kb == "other":
            raise FuncError("invalid type for comparison")
        if ka != kb:
            if a is not None and b is not None:
                raise FuncError("incompatible types for comparison")
            continue
        if a == b:
            return True
    return False


def _lt(a: Any, b: Any) -> bool:
    ka, kb = _kind(a), _kind(b)
    if ka in ("bool", "invalid", "other") or kb in ("bool", "invalid", "other"):
        raise FuncError("invalid type for comparison")
    if ka != kb:
        raise FuncError("incompatible types for comparison")
    return bool(a < b)


def truth(v: Any) -> bool:
    """Go template truthiness: false, 0, nil and empty strings, maps and lists are false."""
    if v is None:
        return False
    if isinstance(v, bool | int | float):
        return v != 0
    if isinstance(v, str | dict | list | tuple):
        return len(v) > 0
    return True


def _and(first: Any, *rest: Any) -> Any:
    for v in (first, *rest):
        if not truth(v):
            return v
    return rest[-1] if rest else first


def _or(first: Any, *rest: Any) -> Any:
    for v in (first, *rest):
        if truth(v):
            return v
    return rest[-1] if rest else first


def _len(v: Any) -> int:
    if isinstance(v, str | dict | list | tuple):
        return len(v)
    raise FuncError(f"len of type {go_type(v)}")


def _index(item: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(item, dict):
            item = item.get(_string(key), "")
        elif isinstance(item, list | tuple) and isinstance(key, int):
            if not 0 <= key < len(item):
                raise FuncError(f"index out of range: {key}")
            item = item[key]
        else:
            raise FuncError(f"can't index item of type {go_type(item)}")
    return item


def _printf(fmt: Any, *args: Any) -> str:
    return go_sprintf(_string(fmt), *args)


FUNCS: dict[str, Callable[..., Any]] = {
    "and": _and,
    "or": _or,
    "not": lambda v: not truth(v),
    "len": _len,
    "index": _index,
    "print": go_sprint,
    "println": go_sprintln,
    "printf": _printf,
    "eq": _eq,
    "ne": lambda a, b: not _eq(a, b),
    "lt": _lt,
    "le": lambda a, b: _lt(a, b) or _eq(a, b),
    "gt": lambda a, b: not (_lt(a, b) or _eq(a, b)),
    "ge": lambda a, b: not _lt(a, b),
    "humanize": humanize,
    "humanize1024": humanize1024,
    "humanizeDuration": humanize_duration,
    "humanizePercentage": humanize_percentage,
    "humanizeTimestamp": humanize_timestamp,
    "title": title,
    "toUpper": lambda s: _string(s).upper(),
    "toLower": lambda s: _string(s).lower(),
    "match": match,
    "reReplaceAll": re_replace_all,
    "stripPort": strip_port,
}
# Functions whose value depends on the rule manager's settings; template.py binds them.
CONTEXT_FUNCS = frozenset({"externalURL", "pathPrefix"})


def path_prefix(external_url: str) -> str:
    """The path of the external URL, as Prometheus's `pathPrefix`."""
    return urlsplit(external_url).path
