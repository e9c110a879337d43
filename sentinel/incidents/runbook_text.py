"""A stored runbook (a RUNBOOK timeline event's data) as lines of text for people."""

from __future__ import annotations

from typing import Any


def _verdicts(signature: Any, model: Any) -> str:
    """Both verdicts on the failure family: the crash signature's and the model's."""
    said = "no signature" if not isinstance(signature, dict) else \
        f"{signature.get('category')} ({signature.get('signature')})"
    return f"signature says {said}; model says {model or 'nothing'}"


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
    verdict = data.get("signature_verdict")
    if book.get("family") or isinstance(verdict, dict):
        lines.append(f"Family: {_verdicts(verdict, book.get('family'))}")
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
