"""The simulator's structured output and chat fault modes, over real HTTP on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import jsonschema
import pytest

from sentinel.sim import SimServer, SimStateError, start_sim
from sentinel.sim.structured import instance

SCHEMA = {
    "type": "object", "additionalProperties": False,
    "required": ["summary", "steps", "confidence", "action"],
    "properties": {
        "summary": {"type": "string", "minLength": 1, "maxLength": 40},
        "steps": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 5},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "action": {"type": "string", "enum": ["none", "docker_restart"]},
        "count": {"type": "integer", "minimum": 3},
        "nested": {"$ref": "#/$defs/inner"},
        "maybe": {"type": ["null", "boolean"]},
    },
    "$defs": {"inner": {"type": "object", "properties": {"k": {"const": "v"}}}},
}


@pytest.fixture
def sim() -> Iterator[SimServer]:
    server = start_sim(max_model_len=512)
    yield server
    server.stop()


@pytest.fixture
def client(sim: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, timeout=5) as c:
        yield c


def _chat(client: httpx.Client, **extra: object) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": "why did it crash?"}], **extra}
    return client.post("/v1/chat/completions", json=body)


FIELDS = {
    "response_format": {"response_format": {"type": "json_schema",
                                            "json_schema": {"name": "r", "schema": SCHEMA,
                                                            "strict": True}}},
    "structured_outputs": {"structured_outputs": {"json": SCHEMA}},
    "guided_json": {"guided_json": json.dumps(SCHEMA)},
}


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_each_structured_output_field_gets_the_same_valid_document(client, field) -> None:
    response = _chat(client, **FIELDS[field])
    assert response.status_code == 200
    doc = json.loads(response.json()["choices"][0]["message"]["content"])
    assert doc == instance(SCHEMA)
    assert doc["action"] == "none" and 0 <= doc["confidence"] <= 1 and doc["count"] >= 3
    assert 1 <= len(doc["steps"]) <= 5 and doc["nested"] == {"k": "v"}
    jsonschema.validate(doc, SCHEMA)  # an independent validator, not only ours


def test_json_object_and_usage_count_the_answer(client) -> None:
    body = _chat(client, response_format={"type": "json_object"}).json()
    assert json.loads(body["choices"][0]["message"]["content"]) == {}
    assert body["usage"]["completion_tokens"] == 2  # "{" and "}"


def test_max_tokens_cuts_the_document_short(client) -> None:
    body = _chat(client, max_tokens=5, **FIELDS["response_format"]).json()
    assert body["choices"][0]["finish_reason"] == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(body["choices"][0]["message"]["content"])


@pytest.mark.parametrize("extra", [
    {"response_format": {"type": "yaml"}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
    {"guided_json": "{not json"},
])
def test_malformed_structured_fields_get_400(client, extra) -> None:
    response = _chat(client, **extra)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == 400


def test_streamed_structured_answer_reassembles_exactly(client) -> None:
    text = ""
    with client.stream("POST", "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "x"}], "stream": True,
            **FIELDS["structured_outputs"]}) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    text += choice["delta"].get("content", "")
    assert json.loads(text) == instance(SCHEMA)


@pytest.mark.parametrize(("fault", "status"), [("http_400", 400), ("http_500", 500)])
def test_http_faults_answer_once_then_clear(sim, client, fault, status) -> None:
    sim.set_state(chat_fault=fault, chat_fault_count=1)
    assert _chat(client).status_code == status
    assert _chat(client).status_code == 200
    assert sim.state.chat_fault == ""


def test_fault_without_count_stays(sim, client) -> None:
    sim.set_state(chat_fault="http_500")
    assert [_chat(client).status_code for _ in range(3)] == [500, 500, 500]


def test_invalid_json_fault_answers_text(sim, client) -> None:
    sim.set_state(chat_fault="invalid_json", chat_fault_count=1)
    content = _chat(client, **FIELDS["response_format"]).json()["choices"][0]["message"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(content["content"])


@pytest.mark.parametrize("stream", [True, False])
def test_truncated_answer_drops_the_connection(sim, client, stream) -> None:
    sim.set_state(chat_fault="truncated_stream", chat_fault_count=1)
    with pytest.raises(httpx.RemoteProtocolError):
        with client.stream("POST", "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "x"}], "stream": stream,
                **FIELDS["response_format"]}) as response:
            response.read()


def test_timeout_fault_hangs_past_the_client_timeout(sim) -> None:
    sim.set_state(chat_fault="timeout", chat_fault_count=1)
    with httpx.Client(base_url=sim.url, timeout=0.3) as c, pytest.raises(httpx.ReadTimeout):
        _chat(c)
    # /v1/models still answers: only chat hangs.
    with httpx.Client(base_url=sim.url, timeout=2) as c:
        assert c.get("/v1/models").status_code == 200


def test_chat_requests_are_kept_for_inspection(sim, client) -> None:
    _chat(client, max_tokens=7)
    assert sim.chat_requests[-1]["max_tokens"] == 7


@pytest.mark.parametrize("update", [{"chat_fault": "explode"}, {"chat_fault": 3}])
def test_bad_fault_names_are_refused(sim, update) -> None:
    with pytest.raises(SimStateError):
        sim.update_state(update)
