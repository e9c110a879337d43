"""Links out from an incident: the dashboard, the Prometheus graph of its expression, and
the rule's runbook.

The dashboard's URL is the operator's template (`web.grafana_url`) with the
incident's target, alertname and window filled in, each URL-encoded; the
graph is `web.prometheus_url` + `/graph?g0.expr=<expression>`; the runbook is
the alerts' `runbook_url` annotation. Only http(s) URLs are ever linked: an
annotation holding `javascript:` is text someone wrote, not a link to follow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from sentinel.config.web import WebConfig


def incident_links(web: WebConfig | None, detail: Mapping[str, Any], expr: str | None,
                   window_ms: tuple[int, int]) -> list[dict[str, str]]:
    """[{"name", "url"}] for the incident, in the order the page shows them."""
    inc = detail["incident"]
    start, end = window_ms
    out = []
    if web is not None and web.grafana_url:
        values = {"target": inc["target"], "alertname": inc["alertname"],
                  "from_ms": str(start), "to_ms": str(end)}
        out.append({"name": "Grafana", "url": web.grafana_url.format(
            **{k: quote(str(v), safe="") for k, v in values.items()})})
    if web is not None and web.prometheus_url and expr:
        minutes = max(1, -(-(end - start) // 60_000))
        query = urlencode({"g0.expr": expr, "g0.tab": "0", "g0.range_input": f"{minutes}m"})
        out.append({"name": "Prometheus graph", "url": f"{web.prometheus_url}/graph?{query}"})
    seen = set()
    for alert in detail.get("alerts", ()):
        url = str(alert.get("annotations", {}).get("runbook_url") or "")
        if url and url not in seen and _http(url):
            seen.add(url)
            out.append({"name": "runbook", "url": url})
    return out


def _http(url: str) -> bool:
    parts = urlsplit(url.strip())
    return parts.scheme in ("http", "https") and bool(parts.netloc)
