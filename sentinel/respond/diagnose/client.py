"""One OpenAI-compatible model endpoint: /v1/models, /tokenize, /v1/chat/completions.

Errors, drawn once (every one carries a message with no secret in it):

    ModelError              the endpoint gave no usable answer
    ├── EndpointDown        no connection, a timeout, a stream cut short: retry later
    ├── ServerError         HTTP 5xx (or an error inside the stream): retry later
    └── RequestRejected     HTTP 4xx: this request will not pass as it is

Chat is streamed (`stream_options.include_usage`), so a reply that stops
half-way is seen as such instead of as a short answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from sentinel.config_diagnosis import ModelEndpointConfig
from sentinel.respond.diagnose.schema import RUNBOOK_SCHEMA, SCHEMA_NAME

Message = dict[str, str]
_ERROR_TEXT = 300


class ModelError(Exception):
    """The endpoint gave no usable answer. `retryable`: whether later may work."""

    retryable = True

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class EndpointDown(ModelError):
    """No connection, a timeout, or a reply cut off before its end."""


class ServerError(ModelError):
    """HTTP 5xx, or an error event inside the stream."""


class RequestRejected(ModelError):
    """HTTP 4xx: the same request would be rejected again."""

    retryable = False


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What /v1/models says about the served model. max_model_len is None when not said."""

    id: str
    max_model_len: int | None


@dataclass(frozen=True, slots=True)
class ChatResult:
    """A complete chat answer with its usage and how long it took."""

    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_ms: int


def structured_fields(mode: str) -> dict[str, Any]:
    """The request fields asking for RUNBOOK_SCHEMA JSON, in the dialect `mode` names."""
    if mode == "response_format":
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": SCHEMA_NAME, "schema": RUNBOOK_SCHEMA, "strict": True}}}
    if mode == "structured_outputs":
        return {"structured_outputs": {"json": RUNBOOK_SCHEMA}}
    if mode == "guided_json":
        return {"guided_json": RUNBOOK_SCHEMA}
    return {}


class ModelClient:
    """HTTP calls to one endpoint; `transport` lets tests swap the network layer."""

    def __init__(self, endpoint: ModelEndpointConfig,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.endpoint = endpoint
        base = endpoint.url.removesuffix("/v1")
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        self.timeout_s = endpoint.timeout_ms / 1000
        self._http = httpx.Client(base_url=base, headers=headers, transport=transport,
                                  timeout=httpx.Timeout(self.timeout_s), follow_redirects=False)
        self.has_tokenize: bool | None = None  # learned on first use

    @property
    def name(self) -> str:
        """The endpoint's configured name."""
        return self.endpoint.name

    def close(self) -> None:
        """Close pooled connections."""
        self._http.close()

    def models(self) -> ModelInfo:
        """The configured model (or the first served one) and its max_model_len."""
        body = self._json(self._request("GET", "/v1/models"))
        cards = body.get("data") if isinstance(body, dict) else None
        if not isinstance(cards, list) or not cards:
            raise ServerError("/v1/models listed no model")
        wanted = self.endpoint.model
        card = next((c for c in cards if isinstance(c, dict) and c.get("id") == wanted), None) \
            if wanted else cards[0]
        if not isinstance(card, dict):
            raise RequestRejected("/v1/models does not list the configured model")
        length = card.get("max_model_len")
        return ModelInfo(str(card.get("id")), length if isinstance(length, int) else None)

    def count_tokens(self, model: str, messages: Sequence[Message]) -> int | None:
        """Prompt tokens after the chat template, by the server's /tokenize; None without one."""
        if self.has_tokenize is False:
            return None
        try:
            response = self._request("POST", "/tokenize",
                                      json={"model": model, "messages": list(messages)})
        except RequestRejected as exc:
            if exc.status in (404, 405):
                self.has_tokenize = False
                return None
            raise
        self.has_tokenize = True
        count = self._json(response).get("count")
        if not isinstance(count, int):
            raise ServerError("/tokenize answered without a count")
        return count

    def chat(self, model: str, messages: Sequence[Message], max_tokens: int,
             structured_output: str, temperature: float) -> ChatResult:
        """One streamed chat completion, read to its end within the endpoint's timeout."""
        body = {"model": model, "messages": list(messages), "max_tokens": max_tokens,
                "temperature": temperature, "stream": True,
                "stream_options": {"include_usage": True},
                **structured_fields(structured_output)}
        started = time.monotonic()
        try:
            with self._http.stream("POST", "/v1/chat/completions", json=body) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _status_error(response)
                text, finish, usage = _read_stream(response.iter_lines(),
                                                   started + self.timeout_s)
        except httpx.TimeoutException:
            raise EndpointDown(f"no answer within {self.timeout_s:g}s") from None
        except httpx.RemoteProtocolError:
            raise EndpointDown("the stream was cut off before its end") from None
        except httpx.TransportError as exc:
            raise EndpointDown(f"connection failed: {type(exc).__name__}") from None
        return ChatResult(text, finish, usage.get("prompt_tokens"),
                          usage.get("completion_tokens"),
                          int((time.monotonic() - started) * 1000))

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException:
            raise EndpointDown(f"{path}: no answer within {self.timeout_s:g}s") from None
        except httpx.TransportError as exc:
            raise EndpointDown(f"{path}: connection failed: {type(exc).__name__}") from None
        if response.status_code >= 400:
            raise _status_error(response)
        return response

    @staticmethod
    def _json(response: httpx.Response) -> Any:
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ServerError(f"{response.request.url.path}: answer is not JSON") from None


def _status_error(response: httpx.Response) -> ModelError:
    """The error for an HTTP error status, with the server's message (trimmed)."""
    detail = ""
    try:
        err = response.json().get("error")
        detail = str(err.get("message") if isinstance(err, dict) else err or "")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        detail = response.text
    message = f"HTTP {response.status_code} from {response.request.url.path}: " \
              f"{detail[:_ERROR_TEXT]}".rstrip(": ")
    kind = ServerError if response.status_code >= 500 or response.status_code == 429 \
        else RequestRejected
    return kind(message, response.status_code)


def _read_stream(lines: Iterator[str], deadline: float) -> tuple[str, str | None, dict[str, Any]]:
    """Text, finish reason and usage from server-sent chat chunks, up to `data: [DONE]`."""
    parts: list[str] = []
    finish: str | None = None
    usage: dict[str, Any] = {}
    for line in lines:
        if time.monotonic() > deadline:
            raise EndpointDown("the answer took longer than the timeout")
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return "".join(parts), finish, usage
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise ServerError("a stream chunk is not JSON") from None
        if isinstance(chunk.get("error"), dict):
            raise ServerError(f"error in stream: {str(chunk['error'].get('message'))[:300]}")
        for choice in chunk.get("choices") or ():
            parts.append((choice.get("delta") or {}).get("content") or "")
            finish = choice.get("finish_reason") or finish
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
    raise EndpointDown("the stream ended without [DONE]")
