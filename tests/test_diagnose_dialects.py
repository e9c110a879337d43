"""Structured-output negotiation: the simulator plays each server's dialect over loopback.

With `structured_output: auto` (the default), a config that names only an endpoint's URL
gets a validated runbook from vLLM, llama-cpp-python's server, TGI and Ollama alike; the
forms a server refused are stored with its own words, and the one that worked is
remembered so the next diagnosis asks in it at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from diagnose_helpers import T0, config, open_incident, runbooks

from sentinel.respond.diagnose.dialects import LADDER, is_form_refusal, structured_fields
from sentinel.respond.diagnose.worker import DiagnosisWorker
from sentinel.sim import SimServer, start_sim

pytestmark = pytest.mark.integration


@pytest.fixture
def model() -> Iterator[SimServer]:
    server = start_sim(max_model_len=4096)
    yield server
    server.stop()


def _worker(db, url: str, **kw) -> DiagnosisWorker:
    return DiagnosisWorker(db, config([{"name": "m0", "url": url, "timeout": "5s"}], **kw))


def _forms(sim: SimServer) -> list[str]:
    """The structured-output form of each chat request the simulator received."""
    out = []
    for body in sim.chat_requests:
        fmt = body.get("response_format") or {}
        out.append(next(form for form in LADDER
                        if structured_fields(form).get("response_format", "absent")
                        == (fmt or "absent")
                        and all(k in body for k in structured_fields(form))))
    return out


@pytest.mark.parametrize(("dialect", "form", "refused"), [
    ("vllm", "response_format", []),
    ("ollama", "response_format", []),
    ("llamacpp", "json_object_schema", ["response_format"]),
    ("tgi", "json_object_value", ["response_format", "json_object_schema"]),
])
def test_a_url_alone_gets_a_validated_runbook_from_each_server(incident_db, model, dialect,
                                                               form, refused) -> None:
    model.set_state(model_dialect=dialect)
    incident = open_incident(incident_db)
    _worker(incident_db, model.url).tick(T0 + 1000)
    (data,) = runbooks(incident_db, incident)
    assert data["source"] == "model" and data["validated"] is True, data
    assert data["structured_output"] == form
    assert [r["form"] for r in data.get("refused_forms", [])] == refused
    assert _forms(model) == [*refused, form]


def test_the_refusal_is_stored_in_the_servers_words(incident_db, model) -> None:
    model.set_state(model_dialect="tgi")
    incident = open_incident(incident_db)
    _worker(incident_db, model.url).tick(T0)
    (data,) = runbooks(incident_db, incident)
    said = {r["form"]: r["said"] for r in data["refused_forms"]}
    assert "HTTP 422" in said["response_format"]
    assert "unknown variant `json_schema`" in said["response_format"]
    assert "missing field `value`" in said["json_object_schema"]


def test_the_form_that_worked_is_asked_first_next_time(incident_db, model) -> None:
    model.set_state(model_dialect="llamacpp")
    worker = _worker(incident_db, model.url)
    first = open_incident(incident_db, target="tpu-a")
    worker.tick(T0)
    second = open_incident(incident_db, target="tpu-b", now_ms=T0 + 60_000)
    worker.tick(T0 + 61_000)
    assert _forms(model) == ["response_format", "json_object_schema", "json_object_schema"]
    assert runbooks(incident_db, second)[0]["validated"] is True
    assert "refused_forms" not in runbooks(incident_db, second)[0]
    assert runbooks(incident_db, first)[0]["validated"] is True


def test_token_counts_without_usage_in_the_stream_are_estimated_and_say_so(
        incident_db, model) -> None:
    """llama-cpp-python sends no usage in a stream and has no /tokenize: no None+None."""
    model.set_state(model_dialect="llamacpp")
    incident = open_incident(incident_db)
    _worker(incident_db, model.url).tick(T0)
    (data,) = runbooks(incident_db, incident)
    assert data["usage_from"] == "estimate" and data["counted_by"] == "estimate"
    assert data["prompt_tokens"] > 0 and data["completion_tokens"] > 0
    (event,) = [e for e in _timeline_runbooks(incident_db, incident)]
    assert "None" not in event


def test_vllm_usage_comes_from_the_server(incident_db, model) -> None:
    incident = open_incident(incident_db)
    _worker(incident_db, model.url).tick(T0)
    (data,) = runbooks(incident_db, incident)
    assert data["usage_from"] == "server" and data["completion_tokens"] > 0


def test_a_forced_form_is_not_negotiated(incident_db, model) -> None:
    """`structured_output: response_format` against TGI: the refusal is the answer."""
    model.set_state(model_dialect="tgi")
    incident = open_incident(incident_db)
    _worker(incident_db, model.url, structured_output="response_format").tick(T0)
    assert _forms(model) == ["response_format"]
    assert [d["source"] for d in runbooks(incident_db, incident)] == ["static"]


@pytest.mark.parametrize(("status", "message", "refusal"), [
    (400, "response_format.type: Input should be 'text' or 'json_object'", True),
    (422, "Failed to deserialize: unknown variant `json_schema`", True),
    (400, "This model's maximum context length is 4096 tokens", False),
    (404, "response_format not found", False),
    (500, "1 validation error: ('body', 'response_format', 'type')", True),
    (500, "CUDA error: an illegal memory access was encountered", False),
    (503, "response_format: engine sleeping", False),
])
def test_only_a_refusal_of_the_form_steps_down(status, message, refusal) -> None:
    assert is_form_refusal(status, message) is refusal


def _timeline_runbooks(db, incident: int) -> list[str]:
    from diagnose_helpers import timeline
    return [e.message for e in timeline(db, incident) if e.kind == "runbook"]
