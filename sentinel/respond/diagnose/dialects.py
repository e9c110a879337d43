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
steps down when the server refuses the form with a 400 or 422 that names it
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


def structured_fields(mode: str) -> dict[str, Any]:
    """The request fields asking for RUNBOOK_SCHEMA JSON, in the dialect `mode` names."""
    if mode == "response_format":
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": SCHEMA_NAME, "schema": RUNBOOK_SCHEMA, "strict": True}}}
    if mode == "json_object_schema":
        return {"response_format": {"type": "json_object", "schema": RUNBOOK_SCHEMA}}
    if mode == "json_object_value":
        return {"response_format": {"type": "json_object", "value": RUNBOOK_SCHEMA}}
    if mode == "structured_outputs":
        return {"structured_outputs": {"json": RUNBOOK_SCHEMA}}
    if mode == "guided_json":
        return {"guided_json": RUNBOOK_SCHEMA}
    if mode == "json_object":
        return {"response_format": {"type": "json_object"}}
    return {}


def is_form_refusal(status: int | None, message: str) -> bool:
    """Whether an error says the server does not accept this structured-output form."""
    return status in (400, 422) and bool(_FORM_REFUSAL.search(message))


def ladder_from(learned: str | None) -> tuple[str, ...]:
    """The forms to try in order, starting at the one that worked last time."""
    if learned is None or learned not in LADDER:
        return LADDER
    return LADDER[LADDER.index(learned):]
