"""Go's fmt formatting of template values, so annotations read exactly as in Prometheus.

Alert templates in Prometheus are Go text/template; `{{ $value }}` prints a
float64 with `%v` (strconv 'g', shortest digits, exponent from 1e+06 up and
below 1e-04) and `printf` follows Go's verbs, including its in-band error
strings such as `%!d(float64=0.5)`. Template values are Python objects:
float (float64), int (int), str, bool, None (nil), dict (map[string]string)
and list.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any


def _digits(v: float) -> tuple[str, int]:
    """Shortest round-trip decimal digits of |v| and the decimal point position."""
    if v == 0:
        return "0", 1
    _, digits, exp = Decimal(repr(abs(v))).normalize().as_tuple()
    return "".join(map(str, digits)), len(digits) + int(exp)


def _special(v: float) -> str | None:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return None


def format_float(v: float, upper: bool = False) -> str:
    """Go's `%v` of a float64 (strconv.FormatFloat(v, 'g', -1, 64)); 'E' style when upper."""
    special = _special(v)
    if special:
        return special
    sign = "-" if math.copysign(1.0, v) < 0 else ""
    digits, dp = _digits(v)
    exp = dp - 1
    if upper or exp < -4 or exp >= 6:
        mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        e = "E" if upper else "e"
        return f"{sign}{mant}{e}{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if dp <= 0:
        return f"{sign}0.{'0' * -dp}{digits}"
    if dp >= len(digits):
        return f"{sign}{digits}{'0' * (dp - len(digits))}"
    return f"{sign}{digits[:dp]}.{digits[dp:]}"


def format_e_upper(v: float) -> str:
    """strconv.FormatFloat(v, 'E', -1, 64), as promtool prints sample values."""
    return format_float(v, upper=True)


def go_type(value: Any) -> str:
    """The Go type name a template value has."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "map[string]string"
    return "[]interface {}"


def go_str(value: Any) -> str:
    """fmt.Sprint of one value."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_str(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list | tuple):
        return "[" + " ".join(go_str(x) for x in value) + "]"
    return str(value)


def go_sprint(*args: Any) -> str:
    """fmt.Sprint: a space between operands when neither is a string."""
    out = []
    for i, a in enumerate(args):
        if i and not isinstance(a, str) and not isinstance(args[i - 1], str):
            out.append(" ")
        out.append(go_str(a))
    return "".join(out)


def go_sprintln(*args: Any) -> str:
    """fmt.Sprintln: operands always separated by spaces, newline appended."""
    return " ".join(go_str(a) for a in args) + "\n"


_VERB = re.compile(r"%([-+# 0]*)(\d+)?(?:\.(\d*))?([a-zA-Z%])")


def go_sprintf(fmt: str, *args: Any) -> str:
    """fmt.Sprintf for the verbs alert templates use (v d s q f F e E g G x X o c t %)."""
    out: list[str] = []
    pos = 0
    argi = 0
    for m in _VERB.finditer(fmt):
        out.append(fmt[pos : m.start()])
        pos = m.end()
        flags, width, prec, verb = m.group(1), m.group(2), m.group(3), m.group(4)
        if verb == "%":
            out.append("%")
            continue
        if argi >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        arg = args[argi]
        argi += 1
        text = _format_one(verb, flags, prec, arg)
        out.append(_pad(text, flags, width, verb, arg))
    out.append(fmt[pos:])
    if argi < len(args):
        extra = ", ".join(f"{go_type(a)}={go_str(a)}" for a in args[argi:])
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)


def _bad_verb(verb: str, arg: Any) -> str:
    if arg is None:
        return f"%!{verb}(<nil>)"
    return f"%!{verb}({go_type(arg)}={go_str(arg)})"


def _format_one(verb: str, flags: str, prec: str | None, arg: Any) -> str:
    is_int = isinstance(arg, int) and not isinstance(arg, bool)
    pyflags = "".join(f for f in flags if f in "+ #")
    dot = "" if prec is None else f".{prec or 0}"
    if verb == "v":
        if isinstance(arg, float) and dot:
            return _format_float_verb("g", pyflags, dot, arg)
        return go_str(arg)
    if verb in "fFeEgG":
        if not isinstance(arg, float):
            return _bad_verb(verb, arg)
        return _format_float_verb(verb, pyflags, dot, arg)
    if verb in "dxXoc" and is_int:
        return chr(arg) if verb == "c" else ("%" + pyflags + verb) % arg
    if verb in "xX" and isinstance(arg, str):
        text = arg.encode().hex()
        return text.upper() if verb == "X" else text
    if verb == "s" and isinstance(arg, str):
        return arg if prec is None else arg[: int(prec or 0)]
    if verb == "q" and isinstance(arg, str):
        return go_quote(arg)
    if verb == "q" and is_int:
        return "'" + chr(arg) + "'"
    if verb == "t" and isinstance(arg, bool):
        return go_str(arg)
    return _bad_verb(verb, arg)


def _format_float_verb(verb: str, pyflags: str, dot: str, arg: float) -> str:
    special = _special(arg)
    if special:
        if special == "NaN" and "+" in pyflags:
            return "+NaN"
        return special
    if verb in "gG" and not dot:
        text = format_float(arg)
        return text.upper() if verb == "G" else text
    if verb in "fF" and not dot:
        dot = ".6"
    return ("%" + pyflags + dot + verb.lower() if verb == "F" else "%" + pyflags + dot + verb) % arg


def _pad(text: str, flags: str, width: str | None, verb: str, arg: Any) -> str:
    if not width or len(text) >= int(width):
        return text
    n = int(width)
    if "-" in flags:
        return text.ljust(n)
    numeric = isinstance(arg, int | float) and not isinstance(arg, bool) and verb != "s"
    if "0" in flags and numeric and text not in ("+Inf", "-Inf", "NaN"):
        sign = text[0] if text[0] in "+-" else ""
        return sign + text[len(sign) :].rjust(n - len(sign), "0")
    return text.rjust(n)


def go_quote(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
