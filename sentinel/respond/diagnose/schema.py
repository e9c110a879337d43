"""The runbook a model must answer with: its JSON schema, validation, the action allow-list.

The reply is data to show a human. A proposed remediation is recorded only
when it names an action on `ALLOWED_ACTIONS`; nothing executes it here.

`family` is the model's own verdict on the failure family, one of the crash
signatures' categories (`sentinel.logs.CATEGORIES`): the last classifier,
for a death no signature named (the catch-all), shown beside the
signature's verdict. A reply without it (an older prompt) still validates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sentinel.logs.signatures import CATEGORIES

# The actions remediation knows (issue 5); a model may only propose one of these.
ALLOWED_ACTIONS = ("docker_restart", "systemd_restart", "command", "tpu_node_restart",
                   "xla_cache_backup")
NO_ACTION = "none"

MAX_TEXT = 2000
MAX_LINE = 500

RUNBOOK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["summary", "probable_cause", "evidence", "steps", "remediation", "confidence",
                 "family"],
    "properties": {
        "summary": {"type": "string", "minLength": 1, "maxLength": MAX_LINE},
        "probable_cause": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT},
        "evidence": {"type": "array", "maxItems": 10,
                     "items": {"type": "string", "maxLength": MAX_LINE}},
        "steps": {"type": "array", "minItems": 1, "maxItems": 12,
                  "items": {"type": "string", "minLength": 1, "maxLength": MAX_LINE}},
        "remediation": {"type": "string", "enum": [NO_ACTION, *ALLOWED_ACTIONS]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "family": {"type": "string", "enum": list(CATEGORIES)},
    },
}
SCHEMA_NAME = "sentinel_runbook"


class InvalidRunbook(ValueError):
    """A reply that is not JSON or does not match RUNBOOK_SCHEMA; the message says where."""


@dataclass(frozen=True, slots=True)
class Runbook:
    """A validated runbook. `remediation` is None or one of ALLOWED_ACTIONS."""

    summary: str
    probable_cause: str
    evidence: tuple[str, ...]
    steps: tuple[str, ...]
    remediation: str | None
    confidence: float
    family: str | None = None  # one of CATEGORIES, the model's verdict

    def to_json(self) -> dict[str, Any]:
        """The runbook as stored on the timeline."""
        out: dict[str, Any] = {
            "summary": self.summary, "probable_cause": self.probable_cause,
            "evidence": list(self.evidence), "steps": list(self.steps),
            "remediation": self.remediation or NO_ACTION, "confidence": self.confidence}
        if self.family is not None:
            out["family"] = self.family
        return out


def _text(doc: dict[str, Any], key: str, limit: int) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidRunbook(f"{key}: expected a non-empty string")
    if len(value) > limit:
        raise InvalidRunbook(f"{key}: longer than {limit} characters")
    return value


def _lines(doc: dict[str, Any], key: str, low: int, high: int) -> tuple[str, ...]:
    value = doc.get(key)
    if not isinstance(value, list) or not low <= len(value) <= high:
        raise InvalidRunbook(f"{key}: expected a list of {low} to {high} strings")
    for i, item in enumerate(value):
        if not isinstance(item, str) or len(item) > MAX_LINE or (low and not item.strip()):
            raise InvalidRunbook(f"{key}[{i}]: expected a string of at most {MAX_LINE} characters")
    return tuple(value)


def parse_runbook(text: str) -> Runbook:
    """Validate a model's reply against RUNBOOK_SCHEMA; raises InvalidRunbook."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InvalidRunbook(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidRunbook("expected a JSON object")
    extra = sorted(set(doc) - set(RUNBOOK_SCHEMA["properties"]))
    if extra:
        raise InvalidRunbook(f"unexpected keys: {', '.join(extra)}")
    remediation = doc.get("remediation")
    if remediation != NO_ACTION and remediation not in ALLOWED_ACTIONS:
        raise InvalidRunbook(f"remediation: {str(remediation)[:40]!r} is not an allow-listed "
                             "action")
    confidence = doc.get("confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) \
            or not 0 <= confidence <= 1:
        raise InvalidRunbook("confidence: expected a number from 0 to 1")
    family = doc.get("family")
    if family is not None and family not in CATEGORIES:
        raise InvalidRunbook(f"family: {str(family)[:40]!r} is not one of the categories "
                             f"({', '.join(CATEGORIES)})")
    return Runbook(
        summary=_text(doc, "summary", MAX_LINE),
        probable_cause=_text(doc, "probable_cause", MAX_TEXT),
        evidence=_lines(doc, "evidence", 0, 10),
        steps=_lines(doc, "steps", 1, 12),
        remediation=None if remediation == NO_ACTION else remediation,
        confidence=float(confidence),
        family=family,
    )
