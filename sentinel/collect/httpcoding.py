"""The HTTP client's errors and its content-coding decoder (gzip, deflate, stacked, bounded).

Kept apart from the wire (`sentinel.collect.http1`) because it is a job of
its own: undo `Content-Encoding` as the bytes arrive with memory bounded
whatever the compression ratio, so a 1.8 KB `gzip, gzip` bomb stops at the
size limit instead of inflating a gigabyte.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

DECODE_STEP = 64 * 1024
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class HTTPError(Exception):
    """The exchange failed: connection, framing, decoding or size (the message says which)."""


class BodyTooLarge(HTTPError):
    """The body passed the size limit (decoded bytes, or a plain Content-Length)."""


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
