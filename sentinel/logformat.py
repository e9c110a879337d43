"""Sentinel's own log lines: plain text for people, one JSON object a line for pipelines.

Story lines (an alert's transition, an incident opened or resolved, a page sent,
an action decided) carry structured fields through `extra=`: `incident`,
`target`, `alertname`, `receiver`, `action`, `outcome`. The JSON format puts
them beside the message, so Loki or Cloud Logging can filter on them.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from sentinel.secrets import RedactingFilter

FORMATS = ("text", "json")
FIELDS = ("incident", "target", "alertname", "receiver", "action", "outcome", "state", "reason")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg, the story fields, exc."""

    def __init__(self, redaction: RedactingFilter | None = None) -> None:
        super().__init__()
        self._redaction = redaction

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                doc[name] = self._clean(value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            doc["exc"] = record.exc_text
        return json.dumps(doc, ensure_ascii=False, default=str)

    def _clean(self, value: Any) -> Any:
        # The redacting filter rewrites msg and exc_text; fields pass here instead.
        if isinstance(value, str) and self._redaction is not None:
            return self._redaction.redactor.redact(value)
        return value


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message [key=value ...]` with the story fields appended."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        line = super().formatMessage(record)
        fields = [f"{n}={getattr(record, n)}" for n in FIELDS
                  if getattr(record, n, None) is not None]
        return f"{line} [{' '.join(fields)}]" if fields else line
