"""Sentinel's own log formats: story fields beside the message, secrets redacted in both."""

from __future__ import annotations

import io
import json
import logging

import pytest

from sentinel.logformat import JsonFormatter, TextFormatter
from sentinel.secrets import Redactor, install_redaction

SECRET = "hunter2-secret-token-value"


def _logger(formatter_for) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    logger = logging.getLogger(f"test.logformat.{id(out)}")
    logger.propagate = False
    handler = logging.StreamHandler(out)
    logger.handlers[:] = [handler]
    redaction = install_redaction(Redactor([SECRET]), logger)
    handler.setFormatter(formatter_for(redaction))
    logger.setLevel(logging.INFO)
    return logger, out


def test_json_lines_carry_the_story_fields_and_no_secret() -> None:
    logger, out = _logger(JsonFormatter)
    logger.info("incident %d opened for %s", 7, "KVCacheHigh",
                extra={"incident": 7, "target": "gemma", "alertname": "KVCacheHigh",
                       "reason": f"token {SECRET}"})
    try:
        raise RuntimeError(f"receiver said {SECRET}")
    except RuntimeError:
        logger.exception("page failed", extra={"receiver": "oncall"})
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["message"] == "incident 7 opened for KVCacheHigh"
    assert (first["incident"], first["target"], first["alertname"]) == (7, "gemma", "KVCacheHigh")
    assert first["severity"] == "INFO" and first["time"].endswith("Z")
    assert second["receiver"] == "oncall" and "RuntimeError" in second["exc"]
    assert SECRET not in out.getvalue()


def test_text_lines_append_the_fields() -> None:
    logger, out = _logger(lambda _: TextFormatter())
    logger.info("page sent", extra={"incident": 3, "receiver": "oncall"})
    logger.info("plain line")
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("page sent [incident=3 receiver=oncall]")
    assert lines[1].endswith("plain line")


# -- Cloud Logging's structured-logging rules ------------------------------------------
# As documented for the agents that read a container's or a VM's JSON lines
# (https://cloud.google.com/logging/docs/structured-logging, "special JSON fields"):
# `severity` is a LogSeverity name (anything else is not understood: DEFAULT),
# `message` is the entry's text, `time` an RFC 3339 timestamp,
# `logging.googleapis.com/sourceLocation` an object {file, line, function},
# `logging.googleapis.com/labels` a map of strings to strings,
# `logging.googleapis.com/trace` a resource name `projects/PROJECT_ID/traces/TRACE_ID`;
# those keys are taken out of the payload, every other key stays in jsonPayload.
LOG_SEVERITIES = ("DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL",
                  "ALERT", "EMERGENCY")


def as_log_entry(line: str) -> dict:
    """The LogEntry Cloud Logging's agent makes of one JSON line (the documented fields)."""
    import re
    from datetime import datetime

    payload = json.loads(line)
    assert isinstance(payload, dict) and "\n" not in line  # one object, one line
    entry: dict = {}
    sev = payload.pop("severity", None)
    entry["severity"] = sev if sev in LOG_SEVERITIES else "DEFAULT"
    if "time" in payload:
        text = payload.pop("time")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)",
                            text), text
        entry["timestamp"] = datetime.fromisoformat(text.replace("Z", "+00:00"))
    loc = payload.pop("logging.googleapis.com/sourceLocation", None)
    if loc is not None:
        assert set(loc) <= {"file", "line", "function"} and isinstance(loc["line"], int)
        entry["sourceLocation"] = loc
    labels = payload.pop("logging.googleapis.com/labels", None)
    if labels is not None:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
        entry["labels"] = labels
    trace = payload.pop("logging.googleapis.com/trace", None)
    if trace is not None:
        assert re.fullmatch(r"projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/traces/[0-9a-f]{32}", trace)
        entry["trace"] = trace
    entry["message"] = payload.get("message")
    entry["jsonPayload"] = payload
    return entry


def _record(level: int, msg: str = "m", **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("sentinel.t", level, "/src/sentinel/x.py", 42, msg, (), None,
                               func="tick")
    for k, v in extra.items():
        setattr(record, k, v)
    return record


@pytest.mark.parametrize(("level", "expected"), [
    (logging.DEBUG, "DEBUG"), (logging.INFO, "INFO"), (logging.WARNING, "WARNING"),
    (logging.ERROR, "ERROR"), (logging.CRITICAL, "CRITICAL"),
    (25, "INFO"), (5, "DEBUG"), (60, "CRITICAL"), (logging.NOTSET, "DEFAULT")])
def test_cloud_logging_reads_the_right_severity(level: int, expected: str) -> None:
    entry = as_log_entry(JsonFormatter(project="").format(_record(level)))
    assert entry["severity"] == expected


def test_cloud_logging_reads_time_message_source_labels_and_trace() -> None:
    record = _record(logging.WARNING, "incident %d: restart refused", incident=7,
                     target="gemma", alertname="X", reason="cold cache")
    record.args = (7,)
    record.created = 1_714_564_800.25
    entry = as_log_entry(JsonFormatter(project="my-tpu-project").format(record))
    assert entry["message"] == "incident 7: restart refused"
    assert entry["timestamp"].isoformat() == "2024-05-01T12:00:00.250000+00:00"
    assert entry["sourceLocation"] == {"file": "/src/sentinel/x.py", "line": 42,
                                       "function": "tick"}
    # Labels are strings (the incident id too); free text stays out of them.
    assert entry["labels"] == {"incident": "7", "target": "gemma", "alertname": "X"}
    assert entry["trace"].startswith("projects/my-tpu-project/traces/")
    # Every line of one incident shares its trace; another incident has another.
    again = as_log_entry(JsonFormatter(project="my-tpu-project").format(
        _record(logging.INFO, incident=7)))
    other = as_log_entry(JsonFormatter(project="my-tpu-project").format(
        _record(logging.INFO, incident=8)))
    assert again["trace"] == entry["trace"] != other["trace"]
    # The story fields stay in the payload as they were (Loki's `| json`, jq).
    assert entry["jsonPayload"]["incident"] == 7
    assert entry["jsonPayload"]["reason"] == "cold cache"


def test_no_trace_without_a_project_or_an_incident(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    monkeypatch.delenv("GCP_PROJECT", raising=False)
    assert "trace" not in as_log_entry(JsonFormatter().format(_record(logging.INFO,
                                                                       incident=3)))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-project")
    assert "trace" not in as_log_entry(JsonFormatter().format(_record(logging.INFO)))
    traced = as_log_entry(JsonFormatter().format(_record(logging.INFO, incident=3)))
    assert traced["trace"].startswith("projects/env-project/traces/")


def test_an_exception_keeps_its_traceback_and_the_line_stays_one_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = _record(logging.ERROR, "failed")
        record.exc_info = sys.exc_info()
    line = JsonFormatter(project="").format(record)
    entry = as_log_entry(line)
    assert entry["severity"] == "ERROR" and "ValueError: boom" in entry["jsonPayload"]["exc"]
