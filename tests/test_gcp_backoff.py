"""Backoff with jitter and error classification for the Google Cloud sources; the fake's filter."""

from __future__ import annotations

import random

import pytest
import requests
from fakes.logging_filter import FilterError, compile_filter
from google.api_core import exceptions as gexc
from google.auth.exceptions import DefaultCredentialsError

from sentinel.collect.gcp import Backoff, ErrorKind, classify_error


@pytest.mark.parametrize(("exc", "retryable"), [
    (gexc.TooManyRequests("quota"), True),
    (gexc.InternalServerError("boom"), True),
    (gexc.ServiceUnavailable("down"), True),
    (gexc.BadRequest("bad filter"), False),
    (gexc.PermissionDenied("no logging.viewer"), False),
    (gexc.NotFound("no node"), False),
    (DefaultCredentialsError("none"), False),
    (requests.ConnectionError("refused"), True),
    (ValueError("Expecting value"), True),
])
def test_classify(exc: Exception, retryable: bool) -> None:
    assert classify_error(exc).retryable is retryable


def test_delays_grow_with_jitter_and_cap() -> None:
    backoff = Backoff(base_ms=1_000, max_ms=8_000, rng=random.Random(1))
    retry = ErrorKind(True, "429")
    delays = [backoff.failed(0, retry) for _ in range(6)]
    for n, delay in enumerate(delays):
        ceiling = min(8_000, 1_000 * 2 ** n)
        assert ceiling // 2 <= delay <= ceiling
    assert not backoff.ready(delays[-1] - 1) and backoff.ready(delays[-1])
    assert backoff.failed(0, ErrorKind(True, "429", retry_after_ms=60_000)) == 8_000
    assert backoff.failed(0, ErrorKind(False, "403")) == 8_000
    backoff.succeeded()
    assert backoff.ready(0) and backoff.failures == 0


ENTRY = {"timestamp": "2026-11-21T10:00:00.5Z", "severity": "ERROR", "logName": "p/logs/stderr",
         "resource": {"type": "tpu_worker", "labels": {"node_id": "n1"}}, "textPayload": "HBM OOM"}


@pytest.mark.parametrize(("text", "matches"), [
    ('timestamp>="2026-11-21T10:00:00.5Z"', True),
    ('timestamp>"2026-11-21T10:00:00.5Z"', False),
    ('timestamp<="2026-11-21T10:00:00.500000001Z"', True),
    ("severity>=WARNING", True), ("severity>=CRITICAL", False),
    ('resource.type="tpu_worker" AND resource.labels.node_id="n2"', False),
    # OR binds tighter than AND, as in the Logging query language.
    ('resource.type="gce_instance" OR logName:"stderr" AND severity=ERROR', True),
    ('NOT textPayload:"oom"', False), ('-textPayload:"OOM"', False),
])
def test_fake_filter(text: str, matches: bool) -> None:
    assert compile_filter(text)(ENTRY) is matches


@pytest.mark.parametrize("text", ['"global text"', 'SEARCH("x")', "protoPayload.x=1",
                                  'timestamp>="yesterday"', "severity>=LOUD", "(a=b"])
def test_fake_filter_refuses_what_it_cannot_evaluate(text: str) -> None:
    with pytest.raises(FilterError):
        compile_filter(text)
