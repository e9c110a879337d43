"""docs/reference/metrics.md names every sentinel_* metric the code defines."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference" / "metrics.md"
# sentinel_* strings in the code that are not metric names.
NOT_METRICS = {"sentinel_session", "sentinel_runbook", "sentinel_mcp_principal",
               "sentinel_outage",  # an annotation on alerts recorded after an outage
               # act-first annotations on pages and "fixed" messages (respond/notify/actfirst)
               "sentinel_action", "sentinel_excerpt", "sentinel_outcome", "sentinel_remediation",
               "sentinel_time_to_recovery",
               # a symptom's page names its cause (respond/notify/cause)
               "sentinel_cause", "sentinel_cause_category"}


def _names_in_code() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "sentinel").rglob("*.py"):
        names.update(re.findall(r"[\"'](sentinel_[a-z_]+)[\"']", path.read_text()))
    return names - NOT_METRICS


def test_every_metric_in_the_code_is_on_the_metrics_page() -> None:
    page = PAGE.read_text()
    listed = set(re.findall(r"sentinel_[a-z_]+", page))
    # prometheus-client adds _total to a Counter's name; the page lists the exposed name.
    missing = sorted(n for n in _names_in_code() if n not in listed and n + "_total" not in listed)
    assert missing == []
    assert len(_names_in_code()) > 50


def test_every_metric_on_the_page_exists_in_the_code() -> None:
    code = _names_in_code()
    listed = set(re.findall(r"sentinel_[a-z_]*[a-z]", PAGE.read_text())) - {"sentinel_probe"}
    stale = sorted(n for n in listed if n not in code and n.removesuffix("_total") not in code)
    assert stale == []
