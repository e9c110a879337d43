"""The request and response shapes of vLLM's OpenAI-compatible server.

Pure functions from parsed JSON to parsed JSON; the HTTP layer in
`server.py` only moves bytes. Shapes follow vLLM's `protocol.py`: errors as
`{"error": {"message", "type", "param", "code"}}`, `owned_by: "vllm"` and
`max_model_len` on model cards, `count`/`max_model_len`/`tokens` from
/tokenize, and the context-length message vLLM's renderer raises.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from sentinel.sim import tokens
from sentinel.sim.tokens import ChatMessage

JsonObject = dict[str, Any]


class ApiError(Exception):
    """An error answered the way vLLM answers it: an HTTP status and an ErrorResponse body."""

    def __init__(self, status: HTTPStatus, message: str, err_type: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type or _ERROR_TYPES.get(status, status.phrase)
        self.param = param

    def body(self) -> JsonObject:
        """The JSON body: vLLM's ErrorResponse (code is the HTTP status as an int)."""
        return {"error": {"message": self.message, "type": self.err_type,
                          "param": self.param, "code": int(self.status)}}


_ERROR_TYPES = {
    HTTPStatus.BAD_REQUEST: "BadRequestError",
    HTTPStatus.NOT_FOUND: "NotFoundError",
    HTTPStatus.INTERNAL_SERVER_ERROR: "InternalServerError",
}

ENGINE_DEAD_MESSAGE = (
    "EngineCore encountered an issue. See stack trace (above) for the root cause."
)


def engine_sleeping_error() -> ApiError:
    """What a generate request gets while the engine sleeps.

    vLLM issue #15483: a request to a sleeping engine used to crash it; the fix
    proposed in vLLM PR #30186 refuses it with 503 and a hint to call /wake_up.
    """
    return ApiError(HTTPStatus.SERVICE_UNAVAILABLE,
                    "The engine is sleeping; call POST /wake_up before sending requests.",
                    "EngineSleepingError")


def engine_dead_error() -> ApiError:
    """What a chat request gets once the engine core has died."""
    return ApiError(HTTPStatus.INTERNAL_SERVER_ERROR, ENGINE_DEAD_MESSAGE, "EngineDeadError")


@dataclass(frozen=True)
class ChatRequest:
    """The parts of a chat completion request the simulator honours."""

    messages: tuple[ChatMessage, ...]
    max_tokens: int | None
    stream: bool
    include_usage: bool
    n: int


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(HTTPStatus.BAD_REQUEST, message, param=param)


def check_model(body: JsonObject, served_model: str) -> None:
    """404 as vLLM answers when the request names a model it does not serve."""
    model = body.get("model")
    if model is not None and model != served_model:
        raise ApiError(HTTPStatus.NOT_FOUND, f"The model `{model}` does not exist.",
                       param="model")


def _content_text(content: object, index: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)
                 and p.get("type") == "text" and isinstance(p.get("text", ""), str)]
        return "\n".join(parts)
    raise _bad(f"messages[{index}].content: expected a string or a list of parts", "messages")


def parse_messages(raw: object) -> tuple[ChatMessage, ...]:
    """Chat messages from a request body's `messages`."""
    if not isinstance(raw, list) or not raw:
        raise _bad("messages: expected a non-empty list", "messages")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            raise _bad(f"messages[{i}]: expected an object with a string 'role'", "messages")
        out.append(ChatMessage(item["role"], _content_text(item.get("content"), i)))
    return tuple(out)


def _optional_int(body: JsonObject, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise _bad(f"{name}: expected an integer, got {value!r}", name)
    if value < 1:
        raise _bad(f"{name} must be at least 1, got {value}.", name)
    return value


def parse_chat(body: object, served_model: str) -> ChatRequest:
    """A ChatRequest from a /v1/chat/completions body, or ApiError (400/404)."""
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object")
    check_model(body, served_model)
    messages = parse_messages(body.get("messages"))
    max_tokens = _optional_int(body, "max_completion_tokens") or _optional_int(body, "max_tokens")
    n = _optional_int(body, "n") or 1
    if n != 1:
        raise _bad("n: the simulator answers one choice only (n=1)", "n")
    stream = body.get("stream", False)
    options = body.get("stream_options") or {}
    if not isinstance(stream, bool) or not isinstance(options, dict):
        raise _bad("stream must be a boolean and stream_options an object", "stream")
    return ChatRequest(messages, max_tokens, stream, bool(options.get("include_usage")), n)


def check_context(prompt_tokens: int, max_tokens: int | None, max_model_len: int) -> None:
    """400 with vLLM's message when the prompt plus the requested output does not fit."""
    output = max_tokens or 0
    if prompt_tokens + output <= max_model_len:
        return
    raise _bad(
        f"This model's maximum context length is {max_model_len} tokens. However, you "
        f"requested {output} output tokens and your prompt contains at least "
        f"{prompt_tokens} input tokens, for a total of at least {prompt_tokens + output} "
        f"tokens. Please reduce the length of the input prompt or the number of requested "
        f"output tokens. (parameter=input_tokens, value={prompt_tokens})",
        "input_tokens",
    )


def plan_reply(req: ChatRequest, prompt_tokens: int, max_model_len: int) -> tuple[list[str], str]:
    """The reply's text deltas and finish reason ("length" when max_tokens cut it short)."""
    pieces = tokens.reply_pieces(req.messages)
    limit = req.max_tokens if req.max_tokens is not None else max_model_len - prompt_tokens
    if len(pieces) > limit:
        return tokens.detokenize(pieces[:limit]), "length"
    return tokens.detokenize(pieces), "stop"


def new_completion_id() -> str:
    """An id shaped like vLLM's ("chatcmpl-" + hex)."""
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> JsonObject:
    """The OpenAI usage block."""
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens, "prompt_tokens_details": None}


def chat_response(completion_id: str, created: int, model: str, deltas: Sequence[str],
                  finish_reason: str, prompt_tokens: int) -> JsonObject:
    """A non-streaming chat.completion object."""
    message: JsonObject = {
        "role": "assistant", "content": "".join(deltas), "refusal": None, "annotations": None,
        "audio": None, "function_call": None, "tool_calls": [], "reasoning_content": None}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason,
              "stop_reason": None}
    return {"id": completion_id, "object": "chat.completion", "created": created,
            "model": model, "choices": [choice], "service_tier": None,
            "system_fingerprint": None, "usage": usage(prompt_tokens, len(deltas)),
            "prompt_logprobs": None, "kv_transfer_params": None}


def chat_chunk(completion_id: str, created: int, model: str, delta: JsonObject,
               finish_reason: str | None = None) -> JsonObject:
    """One chat.completion.chunk carrying `delta`."""
    choice: JsonObject = {"index": 0, "delta": delta, "logprobs": None,
                          "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = None
    return {"id": completion_id, "object": "chat.completion.chunk", "created": created,
            "model": model, "choices": [choice]}


def usage_chunk(completion_id: str, created: int, model: str, prompt_tokens: int,
                completion_tokens: int) -> JsonObject:
    """The final chunk sent when stream_options.include_usage is true."""
    return {"id": completion_id, "object": "chat.completion.chunk", "created": created,
            "model": model, "choices": [], "usage": usage(prompt_tokens, completion_tokens)}


def models_payload(model: str, max_model_len: int, created: int) -> JsonObject:
    """GET /v1/models: one model card as vLLM lists it."""
    permission = {"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                  "created": created, "allow_create_engine": False, "allow_sampling": True,
                  "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                  "allow_fine_tuning": False, "organization": "*", "group": None,
                  "is_blocking": False}
    card = {"id": model, "object": "model", "created": created, "owned_by": "vllm",
            "root": model, "parent": None, "max_model_len": max_model_len,
            "permission": [permission]}
    return {"object": "list", "data": [card]}


def tokenize(body: object, served_model: str, max_model_len: int) -> JsonObject:
    """POST /tokenize: `{"prompt": ...}` or `{"messages": [...]}` to vLLM's TokenizeResponse."""
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object")
    check_model(body, served_model)
    if "messages" in body:
        ids = tokens.encode_chat(parse_messages(body["messages"]))
        texts = None
    elif isinstance(body.get("prompt"), str):
        add_special = body.get("add_special_tokens", True) is not False
        ids = tokens.encode(body["prompt"], add_special_tokens=add_special)
        texts = ["<bos>"] * (len(ids) - len(tokens.pieces(body["prompt"]))) + \
            tokens.pieces(body["prompt"])
    else:
        raise _bad("expected either 'prompt' (a string) or 'messages'", "prompt")
    return {"count": len(ids), "max_model_len": max_model_len, "tokens": ids,
            "token_strs": texts if body.get("return_token_strs") else None}
