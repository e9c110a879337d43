"""Structured output as vLLM's OpenAI server accepts it, answered deterministically.

A chat request may ask for JSON that matches a schema in three ways, depending
on the vLLM version it was written for:

- `response_format: {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`:
  the OpenAI field; vLLM honours it in every version Sentinel supports (and
  `{"type": "json_object"}` for any JSON object).
- `structured_outputs: {"json": schema}`: vLLM's own field since v0.10.2.
- `guided_json: schema`: vLLM's older field, deprecated in v0.10.2 and removed
  in v0.12.0 (later servers ignore it silently and answer unconstrained text).

The simulator accepts all three (it stands for any of those versions) and
answers with a JSON document built from the schema: the same schema always
gives the same document, and the document validates against it.

Other servers take other forms; `model_dialect` in /sim/state makes the
simulator play one, so each of Sentinel's negotiation paths has a fast test:

- `llamacpp` (llama-cpp-python's server): `response_format.type` must be
  `text` or `json_object` (else a 500 naming the field, as the real server
  answers), the schema rides along as `response_format.schema`;
  vLLM's own fields are ignored; streams carry no usage; no /tokenize.
- `tgi` (text-generation-inference's Messages API): `response_format` is
  `{"type": "json_object" | "json", "value": schema}`; anything else is a 422;
  vLLM's own fields are ignored.
- `ollama` (its OpenAI-compatible API): OpenAI's `json_schema` and
  `json_object`; vLLM's own fields are ignored.
"""

from __future__ import annotations

import json
import re
from http import HTTPStatus
from typing import Any

from sentinel.sim.openai_api import ApiError, JsonObject

# Keeps JSON text exact when cut into "tokens": leading whitespace stays with its piece.
_PIECE = re.compile(r"\s*(?:\w+|[^\w\s])")
_MAX_DEPTH = 12


def _bad(message: str, param: str) -> ApiError:
    return ApiError(HTTPStatus.BAD_REQUEST, message, param=param)


def _schema_value(value: object, param: str) -> JsonObject:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise _bad(f"{param}: not valid JSON: {exc}", param) from None
    if not isinstance(value, dict):
        raise _bad(f"{param}: expected a JSON schema object", param)
    return value


DIALECTS = ("vllm", "llamacpp", "tgi", "ollama")


def requested_schema(body: JsonObject, dialect: str = "vllm") -> JsonObject | None:
    """The JSON schema a chat request asks its answer to match, or None for free text.

    Raises ApiError (400, or 422 for TGI) for fields the played server refuses.
    """
    if dialect == "llamacpp":
        return _llamacpp_schema(body.get("response_format"))
    if dialect == "tgi":
        return _tgi_schema(body.get("response_format"))
    fmt = body.get("response_format")
    if fmt is not None:
        if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object",
                                                               "json_schema"):
            raise _bad("response_format: type must be text, json_object or json_schema",
                       "response_format")
        if fmt["type"] == "json_object":
            return {"type": "object"}
        if fmt["type"] == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, dict) or "schema" not in spec:
                raise _bad("response_format.json_schema.schema is required", "response_format")
            return _schema_value(spec["schema"], "response_format")
    if dialect != "vllm":
        return None  # vLLM's own fields mean nothing there: unconstrained text
    outputs = body.get("structured_outputs")
    if isinstance(outputs, dict) and outputs.get("json") is not None:
        return _schema_value(outputs["json"], "structured_outputs")
    if body.get("guided_json") is not None:
        return _schema_value(body["guided_json"], "guided_json")
    return None


def _llamacpp_schema(fmt: object) -> JsonObject | None:
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object"):
        # llama-cpp-python's request model: the type is a Literal of these two, and its
        # validation error comes back as a 500 (seen from the real server, 0.3.36).
        raise ApiError(HTTPStatus.INTERNAL_SERVER_ERROR,
                       "1 validation error: {'type': 'literal_error', 'loc': ('body', "
                       "'response_format', 'type'), 'msg': \"Input should be 'text' or "
                       "'json_object'\"}", param="response_format")
    if fmt["type"] == "text":
        return None
    schema = fmt.get("schema")
    return _schema_value(schema, "response_format") if schema is not None else {"type": "object"}


def _tgi_schema(fmt: object) -> JsonObject | None:
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in ("json", "json_object", "regex"):
        raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY,
                       "Failed to deserialize the JSON body into the target type: "
                       f"response_format: unknown variant `{kind}`, expected one of `json`, "
                       "`regex`, `json_object`", param="response_format")
    if not isinstance(fmt, dict) or "value" not in fmt:
        raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY,
                       "Failed to deserialize the JSON body into the target type: "
                       "response_format: missing field `value`", param="response_format")
    return None if kind == "regex" else _schema_value(fmt["value"], "response_format")


def instance(schema: JsonObject, root: JsonObject | None = None, name: str = "value",
             depth: int = 0) -> Any:
    """A deterministic value valid against `schema` (the JSON Schema subset models are given)."""
    root = schema if root is None else root
    if depth > _MAX_DEPTH:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return instance(target, root, name, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return instance(schema[key][0], root, name, depth + 1)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    return _BUILDERS.get(kind, _string)(schema, root, name, depth)


def _object(schema: JsonObject, root: JsonObject, _name: str, depth: int) -> Any:
    props = schema.get("properties") or {}
    return {key: instance(sub, root, key, depth + 1) for key, sub in props.items()}


def _array(schema: JsonObject, root: JsonObject, name: str, depth: int) -> Any:
    count = int(schema.get("minItems", 2))
    if "maxItems" in schema:
        count = min(count, int(schema["maxItems"]))
    items = schema.get("items") or {"type": "string"}
    return [instance(items, root, f"{name} {i + 1}", depth + 1) for i in range(count)]


def _string(schema: JsonObject, _root: JsonObject, name: str, _depth: int) -> Any:
    text = f"Simulated {name.replace('_', ' ')}."
    minimum, maximum = int(schema.get("minLength", 0)), schema.get("maxLength")
    text = text.ljust(minimum, ".")
    return text[:int(maximum)] if maximum is not None else text


def _number(schema: JsonObject, _root: JsonObject, _name: str, _depth: int) -> Any:
    low, high = schema.get("minimum"), schema.get("maximum")
    value = 0.5 if schema.get("type") == "number" else 1
    if low is not None:
        value = max(value, low)
    if high is not None:
        value = min(value, high)
    return value


_BUILDERS = {
    "object": _object, "array": _array, "string": _string, "number": _number,
    "integer": _number, "boolean": lambda *_: True, "null": lambda *_: None,
}


def answer_pieces(schema: JsonObject) -> list[str]:
    """The JSON answer for `schema` as text deltas, one per simulated token."""
    return _PIECE.findall(json.dumps(instance(schema)))


NOT_JSON = "Sure! The engine ran out of memory, so restart it"


def plan_answer(schema: JsonObject | None, max_tokens: int | None,
                room: int) -> tuple[list[str], str]:
    """Deltas and finish reason of a structured answer; `schema` None means "not JSON".

    `max_tokens` (or the room left in the context) cuts the answer short with
    finish reason "length", which leaves a JSON document unterminated, as a
    real server's would be.
    """
    pieces = answer_pieces(schema) if schema is not None else _PIECE.findall(NOT_JSON)
    limit = max_tokens if max_tokens is not None else room
    if len(pieces) > limit:
        return pieces[:limit], "length"
    return pieces, "stop"
