"""How each self-hosted server constrains a reply to a JSON schema, and finding out which.

Gemma is served by vLLM, SGLang, llama.cpp, Ollama, TGI and LM Studio; each
accepts a different request field for "answer with JSON matching this schema":

    response_format       {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
                          OpenAI's field: vLLM, SGLang, LM Studio, Ollama >= 0.5, llama-server
    json_object_schema    {"type": "json_object", "schema": S}: llama-cpp-python's server
    json_object_value     {"type": "json_object", "value": S}: TGI's Messages API
    structured_outputs    {"json": S}: vLLM >= 0.10.2's own field
    guided_json           S: vLLM < 0.12 (later ones ignore it silently)
    json_object           {"type": "json_object"}: any JSON object (the schema is in the prompt)
    none                  no constraint: the prompt asks for the JSON, the reply is validated

With `structured_output: auto` (the default) the client starts at the top and
steps down when the server refuses the form with an error that names it (a
400 or 422; llama-cpp-python's server says it with a 500)
(the refusal is kept, word for word, for the record), and remembers per
endpoint what worked. A server that ignores a field it does not know answers
free text; that reply fails validation and is asked for again, as any
invalid reply is.
"""

from __future__ import annotations

import re
from typing import Any

from sentinel.respond.diagnose.schema import RUNBOOK_SCHEMA, SCHEMA_NAME

AUTO = "auto"
LADDER = ("response_format", "json_object_schema", "json_object_value", "structured_outputs",
          "guided_json", "json_object", "none")

# A 400/422 that mentions the structured-output form: the server does not take this form.
# Any other 4xx (prompt too long, unknown model) would fail the same way in every form.
_FORM_REFUSAL = re.compile(
    r"response_format|json_schema|json_object|schema|structured|guided|grammar|\bformat\b|"
    r"unknown variant|extra (?:fields|inputs)|unrecognized|unknown field", re.IGNORECASE)


_GRAMMAR_MAX_LENGTH = 100


def _for_grammar(schema: Any) -> Any:
    """RUNBOOK_SCHEMA as a grammar-compiling server can take it (llama.cpp, TGI).

    llama.cpp turns each maxLength into nested grammar rules, and RUNBOOK_SCHEMA's (500,
    2000 characters) exceed its limit: the server fails the request mid-stream ("number
    of rules ... exceeds sane defaults"; seen from llama-cpp-python 0.3.36). Lengths are
    capped at 100 here. Its grammar does not bound numbers either, so `confidence` is
    given as the tenths from 0 to 1. The reply is validated against the full schema.
    """
    if isinstance(schema, dict):
        out = {k: (min(v, _GRAMMAR_MAX_LENGTH) if k == "maxLength" else _for_grammar(v))
               for k, v in schema.items()}
        props = out.get("properties")
        if isinstance(props, dict) and "confidence" in props:
            props["confidence"] = {"enum": [round(i / 10, 1) for i in range(11)]}
        return out
    if isinstance(schema, list):
        return [_for_grammar(v) for v in schema]
    return schema


GRAMMAR_SCHEMA = _for_grammar(RUNBOOK_SCHEMA)


def structured_fields(mode: str) -> dict[str, Any]:
    """The request fields asking for RUNBOOK_SCHEMA JSON, in the dialect `mode` names."""
    if mode == "response_format":
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": SCHEMA_NAME, "schema": RUNBOOK_SCHEMA, "strict": True}}}
    if mode == "json_object_schema":
        return {"response_format": {"type": "json_object", "schema": GRAMMAR_SCHEMA}}
    if mode == "json_object_value":
        return {"response_format": {"type": "json_object", "value": GRAMMAR_SCHEMA}}
    if mode == "structured_outputs":
        return {"structured_outputs": {"json": RUNBOOK_SCHEMA}}
    if mode == "guided_json":
        return {"guided_json": RUNBOOK_SCHEMA}
    if mode == "json_object":
        return {"response_format": {"type": "json_object"}}
    return {}


def is_form_refusal(status: int | None, message: str) -> bool:
    """Whether an error says the server does not accept this structured-output form.

    A 400 or 422 that names the form; and a 500 that does: llama-cpp-python's server
    answers its request validation error ("response_format.type: Input should be 'text'
    or 'json_object'") with a 500.
    """
    return status in (400, 422, 500) and bool(_FORM_REFUSAL.search(message))


def ladder_from(learned: str | None) -> tuple[str, ...]:
    """The forms to try in order, starting at the one that worked last time."""
    if learned is None or learned not in LADDER:
        return LADDER
    return LADDER[LADDER.index(learned):]
