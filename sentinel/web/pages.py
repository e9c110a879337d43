"""HTML for each page, rendered on the server from the API's own dicts by Jinja2 templates.

The environment auto-escapes every interpolation (templates/*.html), so a label,
annotation, log line, runbook or note holding `<script>` is shown as text
without anyone having to remember an escape call; only the server-drawn SVG
(svg.py, which escapes each text it places) is passed as Markup.
Nothing is inlined that a Content-Security-Policy of `script-src 'self'` would
have to allow; the only script is /static/live.js.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape

from sentinel.incidents.runbook_text import runbook_lines
from sentinel.web import svg


def _short(ts: str | None) -> str:
    return "" if not ts else ts.replace("T", " ")[:19]


def _ms(v: object) -> str:
    if not isinstance(v, (int, float)):  # None, or a field this row does not have
        return "–"
    if v < 120_000:
        return f"{v / 1000:.1f}s"
    if v < 7_200_000:
        return f"{v / 60_000:.1f}m"
    return f"{v / 3_600_000:.1f}h"


def _pct(v: object) -> str:
    return "–" if not isinstance(v, (int, float)) else f"{v * 100:.0f}%"


def _num(v: object) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _env() -> Environment:
    env = Environment(loader=PackageLoader("sentinel.web", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update(short=_short, ms=_ms, pct=_pct, num=_num)
    return env


ENV = _env()


def render(template: str, **context: Any) -> str:
    """One template rendered with auto-escaping."""
    return ENV.get_template(template).render(**context)


def layout_page(template: str, title: str, who: str = "", csrf: str = "",
                scripts: bool = False, **context: Any) -> str:
    """A full page: the frame (header, navigation, login state) around the template's body."""
    return render(template, title=title, who=who, csrf=csrf, scripts=scripts, **context)


def incident_rows(items: Sequence[Mapping[str, Any]]) -> str:
    """Table rows of incidents (also served alone for the live update)."""
    return render("incident_rows.html", items=items)


def incident_list_context(open_items: Sequence[Mapping[str, Any]], page: Mapping[str, Any],
                          filters: Mapping[str, str], rows_source: str) -> dict[str, Any]:
    """The list: filters, open incidents first, then all matching, newest first."""
    older = (urlencode({**filters, "cursor": page["next_cursor"]})
             if page.get("next_cursor") else "")
    return {"open_items": open_items, "page": page, "filters": filters,
            "rows_source": rows_source, "older": older}


def runbook_text(d: Mapping[str, Any]) -> str:
    """The diagnosis's runbook, else the crash signature's static one, else ""."""
    texts = ["\n".join(runbook_lines(r["data"] or {})) for r in d["runbooks"][-1:]]
    if not texts:  # the signature's static runbook, until a diagnosis writes one
        texts = [str((x["data"] or {}).get("runbook", "")) for x in d["log_excerpts"][-1:]]
    texts = [t for t in texts if t.strip()]
    return texts[0] if texts else ""


def stats_context(s: Mapping[str, Any], weekly: Sequence[tuple[str, Mapping[str, Any]]]
                  ) -> dict[str, Any]:
    """Counts and times per alertname, with MTTR bars now and week by week."""
    def mttr(g: Mapping[str, Any], which: str = "time_to_resolve_ms") -> float | None:
        v = g[which]["mean"]
        return None if v is None else float(v) / 1000
    # Per rule: over every resolved incident, and over the remediated ones only.
    bars = [(f"{g['key']} {kind}", mttr(g, which)) for g in s["groups"][:8]
            for kind, which in (("all", "time_to_resolve_ms"),
                                ("remediated", "time_to_recovery_ms"))]
    week_bars = [(f"{label} {g['key']}", mttr(g))
                 for label, w in weekly for g in w["groups"][:5]]
    return {"s": s, "rows": [{"key": "all", **s["total"]}, *s["groups"]],
            "by_rule": svg.bar_plot(bars, "mean time to recovery by rule"),
            "by_week": svg.bar_plot(week_bars, "mean time to recovery by rule and week")}
