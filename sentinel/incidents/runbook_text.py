"""A stored runbook (a RUNBOOK timeline event's data) as lines of text for people."""

from __future__ import annotations

from typing import Any


def runbook_lines(data: dict[str, Any]) -> list[str]:
    """Summary, cause, numbered steps and the proposed action; static text or raw text as is."""
    if data.get("source") == "static":
        return str(data.get("text", "")).strip().splitlines()
    book = data.get("runbook")
    if not isinstance(book, dict):
        raw = str(data.get("raw", "")).strip()
        return ["(model answer did not validate; shown as received)", *raw.splitlines()[:40]]
    lines = [f"Summary: {book.get('summary', '')}",
             f"Probable cause: {book.get('probable_cause', '')}"]
    evidence = book.get("evidence") or []
    if evidence:
        lines.append("Evidence:")
        lines += [f"  - {e}" for e in evidence]
    lines.append("Steps:")
    lines += [f"  {i}. {step}" for i, step in enumerate(book.get("steps") or [], 1)]
    action = data.get("proposed_action")
    if action:
        lines.append(f"Proposed action (for review, not run): {action}")
    lines.append(f"Confidence: {book.get('confidence')}")
    return lines
