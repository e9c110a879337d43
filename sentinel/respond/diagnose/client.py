"""One OpenAI-compatible model endpoint: /v1/models, /tokenize, /v1/chat/completions.

Errors, drawn once (every one carries a message with no secret in it):

    ModelError              the endpoint gave no usable answer
    ├── EndpointDown        no connection, a timeout, a stream cut short: retry later
    ├── ServerError         HTTP 5xx (or an error inside the stream): retry later
    └── RequestRejected     HTTP 4xx: this request will not pass as it is

Chat is streamed (`stream_options.include_usage`), so a reply that stops
half-way is seen as such instead of as a short answer.

Nothing the server sends is held whole: the reply text is capped
(`max_reply_bytes`, `diagnosis.max_reply` in the config): once the cap is
reached the rest is discarded by closing the stream, and the result says
`truncated`. Stream lines, error bodies and JSON answers are read in pieces
against their own limits, so a 50 MiB answer (or a 50 MiB line without a
newline) costs at most about the cap in memory.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from sentinel.config.diagnosis import ModelEndpointConfig
from sentinel.respond.diagnose.dialects import (
    AUTO,
    LADDER,
    is_form_refusal,
    ladder_from,
    structured_fields,
)

Message = dict[str, str]
_ERROR_TEXT = 300
DEFAULT_MAX_REPLY_BYTES = 64 * 1024
# /v1/models, /tokenize and error bodies: small JSON documents.
_MAX_BODY_BYTES = 1024 * 1024
# One server-sent event line carries a chunk of the reply, JSON-escaped
# (`\uXXXX` is 6 bytes per character); beyond this it is cut off.
_LINE_SLACK = 16 * 1024


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
    truncated: bool = False  # the reply passed max_reply_bytes; `text` is its head
    dialect: str = ""  # the structured-output form the server took (dialects.py)
    # Forms the server refused on the way there: (form, what it said), word for word.
    refusals: tuple[tuple[str, str], ...] = ()
    usage_from: str = "server"  # or "tokenize" / "estimate" when the server sent no usage


class ModelClient:
    """HTTP calls to one endpoint; `transport` lets tests swap the network layer."""

    def __init__(self, endpoint: ModelEndpointConfig,
                 transport: httpx.BaseTransport | None = None,
                 max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES) -> None:
        self.endpoint = endpoint
        self.max_reply_bytes = max_reply_bytes
        base = endpoint.url.removesuffix("/v1")
        headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        self.timeout_s = endpoint.timeout_ms / 1000
        self._http = httpx.Client(base_url=base, headers=headers, transport=transport,
                                  timeout=httpx.Timeout(self.timeout_s), follow_redirects=False)
        self.has_tokenize: bool | None = None  # learned on first use
        self.dialect: str | None = None  # the structured-output form that worked, learned

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

    def count_text_tokens(self, model: str, text: str) -> int | None:
        """Tokens in `text` by the server's /tokenize (vLLM's form); None without one."""
        if self.has_tokenize is False:
            return None
        try:
            body = self._json(self._request("POST", "/tokenize",
                                            json={"model": model, "prompt": text}))
        except RequestRejected as exc:
            if exc.status in (404, 405):
                self.has_tokenize = False
                return None
            raise
        count = body.get("count") if isinstance(body, dict) else None
        if not isinstance(count, int) and isinstance(body, dict) \
                and isinstance(body.get("tokens"), list):
            count = len(body["tokens"])  # llama.cpp answers the tokens themselves
        return count if isinstance(count, int) else None

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
                    raise _status_error(_capped_response(response))
                lines = _capped_lines(response.iter_bytes(),
                                      6 * self.max_reply_bytes + _LINE_SLACK)
                reply = _read_stream(lines, started + self.timeout_s, self.max_reply_bytes)
        except httpx.TimeoutException:
            raise EndpointDown(f"no answer within {self.timeout_s:g}s") from None
        except httpx.RemoteProtocolError:
            raise EndpointDown("the stream was cut off before its end") from None
        except httpx.TransportError as exc:
            raise EndpointDown(f"{self.endpoint.url.removesuffix('/v1')}/v1/chat/completions: "
                               f"connection failed: "
                               f"{_transport_reason(exc)}") from None
        # Leaving the `with` closed the connection: a truncated reply is not
        # downloaded further (and vLLM stops generating when its client goes).
        return ChatResult(reply.text, reply.finish, reply.usage.get("prompt_tokens"),
                          reply.usage.get("completion_tokens"),
                          int((time.monotonic() - started) * 1000), reply.truncated)

    def chat_structured(self, model: str, messages: Sequence[Message], max_tokens: int,
                        mode: str, temperature: float) -> ChatResult:
        """`chat` asking for the runbook's JSON in `mode`; `auto` finds the server's form.

        A form the server refuses (dialects.is_form_refusal) is passed over for the next
        one; the one that answered is remembered for this endpoint. Every refusal is kept
        on the result, so the record says what the server wanted.
        """
        if mode != AUTO:
            return replace(self.chat(model, messages, max_tokens, mode, temperature),
                           dialect=mode)
        start = ladder_from(self.dialect)
        order = start + tuple(f for f in LADDER if f not in start)
        refusals: list[tuple[str, str]] = []
        for form in order:
            try:
                result = self.chat(model, messages, max_tokens, form, temperature)
            except (RequestRejected, ServerError) as exc:
                if not is_form_refusal(exc.status, str(exc)):
                    raise
                refusals.append((form, str(exc)))
                continue
            self.dialect = form
            return replace(result, dialect=form, refusals=tuple(refusals))
        raise RequestRejected("every structured-output form was refused: " + "; ".join(
            f"{form}: {message}" for form, message in refusals), 400)

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            with self._http.stream(method, path, **kwargs) as streamed:
                response = _capped_response(streamed)
        except httpx.TimeoutException:
            raise EndpointDown(f"{path}: no answer within {self.timeout_s:g}s") from None
        except httpx.TransportError as exc:
            raise EndpointDown(f"{self.endpoint.url.removesuffix('/v1')}{path}: connection failed: "
                               f"{_transport_reason(exc)}") from None
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


class _TooLong(Exception):
    """A stream line longer than its limit."""


def _capped_response(response: httpx.Response, limit: int = _MAX_BODY_BYTES) -> httpx.Response:
    """A fully read copy of a streamed response, its body cut at `limit` bytes."""
    body = bytearray()
    for piece in response.iter_bytes():
        body += piece[: limit - len(body)]
        if len(body) >= limit:
            break
    return httpx.Response(response.status_code, headers=response.headers,
                          content=bytes(body), request=response.request)


def _capped_lines(pieces: Iterator[bytes], limit: int) -> Iterator[str]:
    """Lines of a byte stream (without their ends); raises _TooLong past `limit` bytes."""
    buf = bytearray()
    for piece in pieces:
        seen = len(buf)  # the bytes before `piece` hold no newline: search only the new ones
        buf += piece
        while (end := buf.find(b"\n", seen)) >= 0:
            line = bytes(buf[:end])
            del buf[: end + 1]
            seen = 0
            yield line.decode("utf-8", "replace").rstrip("\r")
        if len(buf) > limit:
            raise _TooLong
    if buf:
        yield buf.decode("utf-8", "replace").rstrip("\r")


@dataclass(slots=True)
class _Reply:
    """The reply as read so far."""

    text: str = ""
    finish: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    truncated: bool = False


def _read_stream(lines: Iterator[str], deadline: float, max_bytes: int) -> _Reply:
    """Text, finish reason and usage from server-sent chat chunks, up to `data: [DONE]`.

    Stops reading when the text passes `max_bytes` (UTF-8): the text is cut
    there at a character boundary and the reply marked truncated.
    """
    parts: list[str] = []
    size = 0
    reply = _Reply()
    try:
        for line in lines:
            if time.monotonic() > deadline:
                raise EndpointDown("the answer took longer than the timeout")
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                reply.text = "".join(parts)
                return reply
            try:
                chunk = json.loads(data)
            except json.JSONDecodeError:
                raise ServerError("a stream chunk is not JSON") from None
            if not isinstance(chunk, dict):
                raise ServerError("a stream chunk is not a JSON object")
            if isinstance(chunk.get("error"), dict):
                raise ServerError(
                    f"error in stream: {str(chunk['error'].get('message'))[:300]}")
            for piece, finish in _choices(chunk):
                parts.append(piece)
                size += len(piece.encode())
                reply.finish = finish or reply.finish
            if isinstance(chunk.get("usage"), dict):
                reply.usage = chunk["usage"]
            if size > max_bytes:
                break
        else:
            raise EndpointDown("the stream ended without [DONE]")
    except _TooLong:
        pass  # one line longer than the cap could ever need: the reply is too long
    reply.text = _utf8_head("".join(parts), max_bytes)
    reply.truncated = True
    reply.finish = "length"
    return reply


def _choices(chunk: dict[str, Any]) -> Iterator[tuple[str, str | None]]:
    """(text piece, finish reason) of each choice in a chunk; ServerError when malformed.

    A chunk of the wrong shape (`"delta": "oops"`, `"choices": 5`) is the
    server's fault like a chunk that is not JSON: a retryable ModelError, so
    the worker backs off, tries the next endpoint and falls back to the static
    runbook, rather than an AttributeError escaping every time.
    """
    choices = chunk.get("choices")
    if choices is None:
        return
    if not isinstance(choices, list):
        raise ServerError("a stream chunk's choices are not a list")
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise ServerError("a stream chunk's delta is not a JSON object")
        content = delta.get("content") or ""
        finish = choice.get("finish_reason")
        if not isinstance(content, str) or not isinstance(finish, str | None):
            raise ServerError("a stream chunk's content or finish_reason is not a string")
        yield content, finish


def _utf8_head(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` whose UTF-8 form fits in `max_bytes`."""
    return text.encode()[:max_bytes].decode("utf-8", "ignore")


def _transport_reason(exc: httpx.TransportError) -> str:
    """`ConnectError (Connection refused)`: the kind and the OS's words, never a header."""
    cause = exc.__cause__ or exc.__context__
    words = getattr(cause, "strerror", None) or str(exc).split(":")[-1].strip()
    return f"{type(exc).__name__} ({words})" if words else type(exc).__name__
