"""The HTTP client's answers: errors, `Response`, and the body's content decoding.

Kept apart from the wire (`sentinel.collect.http1`, which frames the bytes)
because it is a job of its own: undo `Content-Encoding` with memory bounded
whatever the compression ratio, so a 1.8 KB `gzip, gzip` bomb stops at the
size limit instead of inflating a gigabyte.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

DECODE_STEP = 64 * 1024
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class HTTPError(Exception):
    """The exchange failed: connection, framing, decoding or size (the message says which)."""


class BodyTooLarge(HTTPError):
    """The body passed the size limit (decoded bytes, or a plain Content-Length)."""


@dataclass(frozen=True, slots=True)
class Response:
    """Status, headers (lower-case names, last value wins) and the decoded body."""

    status: int
    reason: str
    headers: dict[str, str]
    body: bytes


def codings(value: str) -> list[str]:
    """The content codings of a `Content-Encoding` value, in the order they were applied."""
    return [c.strip().lower() for c in value.split(",") if c.strip()]


class Decoder:
    """Undo a list of content codings as bytes arrive, refusing more than `limit` decoded bytes.

    Every layer inflates at most DECODE_STEP bytes per step, and the output
    is counted before it is kept, so memory stays bounded whatever the
    ratio of the input (a 1.8 KB `gzip, gzip` bomb stops at the limit).
    With a `sink`, decoded pieces go to it as they come and are not kept.
    """

    def __init__(self, encodings: list[str], limit: int,
                 sink: Callable[[bytes], None] | None = None) -> None:
        self.limit = limit
        self.size = 0
        self.parts: list[bytes] = []
        self.sink = sink
        self._wbits: list[int] = []
        for enc in reversed(encodings):  # the last coding applied is undone first
            if enc == "identity":
                continue
            if enc not in _WBITS:
                raise HTTPError(f"unsupported Content-Encoding {enc!r}")
            self._wbits.append(_WBITS[enc])
        self._layers = [zlib.decompressobj(w) for w in self._wbits]

    @property
    def plain(self) -> bool:
        """No coding to undo: the wire size is the decoded size."""
        return not self._layers

    def feed(self, data: bytes) -> None:
        """Decode a piece of the body."""
        self._push(0, data)

    def finish(self) -> bytes:
        """Flush every layer and return the decoded body."""
        for i, layer in enumerate(self._layers):
            if not layer.eof and (tail := layer.flush()):
                self._push(i + 1, tail)
        if any(not layer.eof for layer in self._layers):
            raise HTTPError("compressed body ends early")
        return b"".join(self.parts)

    def _push(self, i: int, data: bytes) -> None:
        if i == len(self._layers):
            self.size += len(data)
            if self.size > self.limit:
                raise BodyTooLarge(f"body size limit exceeded: more than {self.limit} "
                                   "bytes after decoding")
            if self.sink is not None:
                self.sink(data)
            else:
                self.parts.append(data)
            return
        while data:
            layer = self._layers[i]
            if layer.eof:  # another gzip member follows (concatenated gzip is valid)
                if not data.strip(b"\0\r\n\t "):
                    return  # padding after the stream
                self._layers[i] = layer = zlib.decompressobj(self._wbits[i])
            try:
                out = layer.decompress(data, DECODE_STEP)
            except zlib.error as e:
                raise HTTPError(f"cannot decode body: {e}") from None
            # Not all consumed: either the step was reached, or the stream ended early.
            data = layer.unconsumed_tail or (layer.unused_data if layer.eof else b"")
            if out:
                self._push(i + 1, out)


class RawBody:
    """A coded body's bytes as they came, to be decoded later; refused past `limit` bytes.

    Bounding the coded bytes too keeps a stream of empty gzip members (which
    decode to nothing) from growing until the deadline.
    """

    __slots__ = ("limit", "parts", "size")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.parts: list[bytes] = []

    def feed(self, data: bytes) -> None:
        """Keep a piece of the body."""
        self.size += len(data)
        if self.size > self.limit:
            raise BodyTooLarge(f"body size limit exceeded: more than {self.limit} bytes")
        self.parts.append(data)


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs ~4x, once a request
class CodedAnswer:
    """A whole 200 answer whose body is still coded: `decode` runs in the caller's task."""

    status: int
    reason: str
    headers: dict[str, str]
    decoder: Decoder
    parts: list[bytes]

    def decode(self) -> Response:
        """The answer with its body decoded (HTTPError, BodyTooLarge as `Decoder`)."""
        for part in self.parts:
            self.decoder.feed(part)
        return Response(self.status, self.reason, self.headers, self.decoder.finish())
