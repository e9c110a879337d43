"""The simulated container's `GET /containers/{name}/logs`, as the Docker Engine API serves it.

Without a TTY Docker multiplexes stdout and stderr: each frame is an 8-byte
header (stream type 1 or 2, three zero bytes, the payload length as a
big-endian uint32) and the payload, here one line. With `timestamps=1` each
line starts with its RFC 3339 time in nanoseconds and a space; `since` is a
UNIX time (fractional seconds allowed) and keeps lines at or after it;
`follow=1` keeps the response open and streams new lines as they come
(chunked). The simulated server logs to stderr, as vLLM does.
"""

from __future__ import annotations

import struct
import threading
from datetime import UTC, datetime
from typing import Any

STDERR = 2
_WAIT_S = 0.1  # how often a follower looks for new lines or a stop


def rfc3339_ns(t: float) -> str:
    """A time as Docker prints it: RFC 3339 in UTC with 9 fraction digits."""
    ns = round(t * 1e9)
    base = datetime.fromtimestamp(ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{ns % 1_000_000_000:09d}Z"


def frame(stream: int, payload: bytes) -> bytes:
    """One multiplexed-stream frame."""
    return struct.pack(">BxxxI", stream, len(payload)) + payload


def serve(handler: Any, container: Any, query: dict[str, list[str]],
          stopping: threading.Event) -> None:
    """Answer one logs request on `handler` (a BaseHTTPRequestHandler)."""
    since = float(query.get("since", ["0"])[0] or 0)
    stamps = query.get("timestamps", ["0"])[0] in ("1", "true")
    follow = query.get("follow", ["0"])[0] in ("1", "true")
    handler.send_response(200)
    handler.send_header("Content-Type", "application/vnd.docker.multiplexed-stream")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    sent = 0
    try:
        while True:
            with container.output_changed:
                lines = container.output[sent:]
                sent = len(container.output)
            body = b"".join(
                frame(STDERR, ((rfc3339_ns(t) + " ") if stamps else "").encode()
                      + line.encode() + b"\n")
                for t, line in lines if t >= since)
            if body:
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
                handler.wfile.flush()
            if not follow or stopping.is_set():
                break
            with container.output_changed:
                if len(container.output) == sent:
                    container.output_changed.wait(_WAIT_S)
        handler.wfile.write(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client went away: a follower ends so
    handler.close_connection = True
