"""Sentinel's own log formats: story fields beside the message, secrets redacted in both."""

from __future__ import annotations

import io
import json
import logging

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
    assert first["msg"] == "incident 7 opened for KVCacheHigh"
    assert (first["incident"], first["target"], first["alertname"]) == (7, "gemma", "KVCacheHigh")
    assert first["level"] == "INFO" and first["ts"].endswith("+00:00")
    assert second["receiver"] == "oncall" and "RuntimeError" in second["exc"]
    assert SECRET not in out.getvalue()


def test_text_lines_append_the_fields() -> None:
    logger, out = _logger(lambda _: TextFormatter())
    logger.info("page sent", extra={"incident": 3, "receiver": "oncall"})
    logger.info("plain line")
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("page sent [incident=3 receiver=oncall]")
    assert lines[1].endswith("plain line")
