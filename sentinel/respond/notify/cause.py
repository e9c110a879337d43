"""A symptom's page names its cause (issue 48).

When an incident carries a crash signature's log excerpt (its cause) and a message
is about an alert that is only a symptom of it (`VLLMTargetDown`,
`VLLMHealthCheckFailing`: an alert without the excerpt's `category` label), the
alert's summary leads with the cause and a `sentinel_cause` annotation names it, so a
phone's first line says why the server is down. Receivers keep their formats: only
annotation values change. Pure: the excerpt's timeline data in, annotations out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CAUSE = "sentinel_cause"
# Rides beside CAUSE from the per-incident annotations to the dispatcher, which drops it:
# the cause's own category, to tell the cause's alert from its symptoms.
CAUSE_CATEGORY = "sentinel_cause_category"
CAUSE_LINE_MAX = 160  # one line of a phone's lock screen, roughly


def cause_text(data: Mapping[str, Any] | None) -> str:
    """"hbm_oom: <the excerpt's telling line>" from a LOG_EXCERPT's data, or "" without one.

    The telling line is the last one that names an error (a traceback ends with it),
    else the last line; the excerpt is stored redacted already.
    """
    if not data:
        return ""
    name = str(data.get("category") or data.get("signature") or "")
    lines = [str(x).strip() for x in data.get("excerpt") or [] if str(x).strip()]
    errors = [x for x in lines if "error" in x.lower() or "killed" in x.lower()]
    line = (errors or lines or [""])[-1]
    if len(line) > CAUSE_LINE_MAX:
        line = line[:CAUSE_LINE_MAX - 1] + "…"
    return ": ".join(p for p in (name, line) if p)


def cause_annotations(data: Mapping[str, Any] | None) -> dict[str, str]:
    """The per-incident annotations that carry the cause to `lead_with_cause`."""
    cause = cause_text(data)
    if not cause or data is None:
        return {}
    return {CAUSE: cause, CAUSE_CATEGORY: str(data.get("category") or "")}


def lead_with_cause(annotations: Mapping[str, str], labels: Mapping[str, str]
                    ) -> dict[str, str]:
    """The alert's annotations (with the incident's extra ones merged in) naming the
    cause first when the alert is a symptom of it; CAUSE_CATEGORY is dropped.

    An alert that carries the cause's own category (the crash signature's alert) is the
    cause: it gets no CAUSE and its summary stays as it is.
    """
    out = dict(annotations)
    category = out.pop(CAUSE_CATEGORY, None)
    cause = out.get(CAUSE, "")
    if not cause:
        return out
    if labels.get("category") and labels.get("category") == category:
        del out[CAUSE]
        return out
    summary = out.get("summary", "")
    if not summary.startswith("Cause: "):  # an update re-annotates a page's alerts
        out["summary"] = f"Cause: {cause}. " + (summary or
                                                f"Symptom: {labels.get('alertname', '')}")
    return out


__all__ = ["CAUSE", "CAUSE_CATEGORY", "CAUSE_LINE_MAX", "cause_annotations", "cause_text",
           "lead_with_cause"]
