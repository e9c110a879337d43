"""Sentinel's own log lines: plain text for people, one JSON object a line for pipelines.

Story lines (an alert's transition, an incident opened or resolved, a page sent,
an action decided) carry structured fields through `extra=`: `incident`,
`target`, `alertname`, `receiver`, `action`, `outcome`. The JSON format puts
them beside the message, so Loki, jq or Cloud Logging can filter on them.

The JSON line uses the field names Cloud Logging's structured-logging agents
read (GKE, the Ops Agent on a TPU VM; https://cloud.google.com/logging/docs/
structured-logging): `severity` (a LogSeverity name), `message`, `time` (RFC
3339, UTC), `logging.googleapis.com/sourceLocation` ({file, line, function}),
`logging.googleapis.com/labels` (the story fields as strings, so entries can be
filtered by label) and, for lines about an incident when a project is known,
`logging.googleapis.com/trace` (`projects/P/traces/T`, one trace per incident,
so "show entries for this trace" lists an incident's whole story). Any other
key stays in the entry's jsonPayload, where Loki's `| json` and jq read it too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from datetime import UTC, datetime
from typing import Any

from sentinel.secrets import RedactingFilter

FORMATS = ("text", "json")
FIELDS = ("incident", "target", "alertname", "receiver", "action", "outcome", "state", "reason")
# Story fields that make good Cloud Logging labels (short, few values); `reason`
# and `state` are free text and stay in the payload only.
LABEL_FIELDS = ("incident", "target", "alertname", "receiver", "action", "outcome")
LABELS = "logging.googleapis.com/labels"
SOURCE_LOCATION = "logging.googleapis.com/sourceLocation"
TRACE = "logging.googleapis.com/trace"
# Where the project of the trace resource name comes from when not given.
PROJECT_ENV = ("GOOGLE_CLOUD_PROJECT", "GCP_PROJECT")


def severity(levelno: int) -> str:
    """Cloud Logging's LogSeverity name for a Python level (custom levels round down)."""
    for floor, name in ((logging.CRITICAL, "CRITICAL"), (logging.ERROR, "ERROR"),
                        (logging.WARNING, "WARNING"), (logging.INFO, "INFO")):
        if levelno >= floor:
            return name
    return "DEBUG" if levelno > logging.NOTSET else "DEFAULT"


def rfc3339(created: float) -> str:
    """A record's time as RFC 3339 in UTC with microseconds and Z (Cloud Logging's form)."""
    return datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def incident_trace(project: str, incident: object) -> str:
    """The trace resource name of one incident: 32 hex digits derived from its id."""
    digest = hashlib.sha256(f"sentinel-incident-{incident}".encode()).hexdigest()[:32]
    return f"projects/{project}/traces/{digest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: severity, message, time, logger, Cloud Logging's fields,
    the story fields, exc (the traceback, when there is one)."""

    def __init__(self, redaction: RedactingFilter | None = None,
                 project: str | None = None) -> None:
        super().__init__()
        self._redaction = redaction
        self._project = project if project is not None else next(
            (os.environ[n] for n in PROJECT_ENV if os.environ.get(n)), "")

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "severity": severity(record.levelno),
            "message": record.getMessage(),
            "time": rfc3339(record.created),
            "logger": record.name,
            SOURCE_LOCATION: {"file": record.pathname, "line": record.lineno,
                              "function": record.funcName},
        }
        labels: dict[str, str] = {}
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                doc[name] = self._clean(value)
                if name in LABEL_FIELDS:
                    labels[name] = str(doc[name])
        if labels:
            doc[LABELS] = labels
        incident = getattr(record, "incident", None)
        if self._project and incident is not None:
            doc[TRACE] = incident_trace(self._project, incident)
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
