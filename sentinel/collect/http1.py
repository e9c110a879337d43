"""Sentinel's one HTTP/1.1 client, for scrapes and probes: kept-alive, parsed as bytes arrive.

Why not httpx or aiohttp: a scrape or a probe is one request on a connection
that stays open for the next; their generic machinery (pools, cookie jars,
redirects, header objects) cost 2.4x (aiohttp) to 10.7x (httpx) the CPU of
a hand-written client (`bench/httpclients.py`). Answers are parsed in the
protocol (`data_received` frames the body), not read through an
`asyncio.StreamReader`: an exchange wakes its caller once, when complete,
not at every piece of a streamed answer. `bench/httpwire.py` measured the
two on one workload and the protocol one is this module (the StreamReader
one served the scrapes until both were merged).

What scrapes and probes need is here and tested:

- keep-alive, with one retry on a fresh connection when a reused one turns
  out to be closed by the server before any byte of the answer (the
  idle-close race), so a sink never sees a body twice;
- bodies framed by Content-Length, chunked transfer coding (extensions,
  trailers), or the close; head and chunk lines with size limits;
- `Content-Encoding` with any number of codings (`gzip, gzip`), each layer
  undone in bounded steps with the size limit on the decoded bytes (a
  compression bomb is refused after `max_bytes`, never inflated in memory)
  and on the coded ones; a kept body is decoded in the caller's task, a
  sink's as it arrives;
- a non-200 answered with its status and no body, the connection closed
  (no time spent draining an error page);
- requests with a body (a probe's POST of JSON), prepared once by
  `build_request`; a 200's body handed to a `sink` as it arrives instead of
  kept, so a streamed answer (server-sent events) has its first token timed
  when it comes;
- TLS through one shared `ssl.SSLContext`;
- one deadline for the whole exchange, connecting included.

The caller bounds an exchange with `get(..., deadline=)`, an instant in loop
time: it fails with TimeoutError then, connecting included, through the
loop's one timer for every request (`sentinel.collect.deadlines`). On any
error, timeout or cancellation the connection is closed, never reused
half-read.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from urllib.parse import urlsplit

from sentinel.collect.deadlines import Deadlines, SentinelLate, deadlines
from sentinel.collect.httpbody import (
    BodyTooLarge,
    CodedAnswer,
    Decoder,
    HTTPError,
    RawBody,
    Response,
    codings,
)

__all__ = ["BodyTooLarge", "Connection", "Decoder", "HTTPError", "Response", "build_request",
           "parse_head", "shared_ssl_context"]

MAX_HEAD = 64 * 1024
_MAX_LINE = 4 * 1024  # a chunk-size line (with extensions) or a trailer
_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _LENGTH, _UNTIL_CLOSE = range(7)

_shared_ssl: ssl.SSLContext | None = None


def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context for every target (building one costs milliseconds and memory)."""
    global _shared_ssl
    if _shared_ssl is None:
        _shared_ssl = ssl.create_default_context()
    return _shared_ssl


def build_request(url: str, path: str, headers: dict[str, str], method: str = "GET",
                  body: bytes | None = None) -> bytes:
    """The bytes of a request for `path` at `url`'s origin, built once and sent many times.

    A `body` (e.g. a JSON document for a POST) goes with its Content-Length.
    """
    lines = [f"{method} {path} HTTP/1.1", f"Host: {_Origin(url).host_header}",
             "Connection: keep-alive"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def parse_head(head: bytes) -> tuple[int, str, dict[str, str], bool]:
    """Status, reason, headers (lower-case names) and keep-alive of a response head."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HTTPError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    conn = headers.get("connection", "").lower()
    keep = "close" not in conn and (parts[0] != "HTTP/1.0" or "keep-alive" in conn)
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers, keep


class _Origin:
    """Host, port, TLS and Host header of a URL's origin (http or https only)."""

    def __init__(self, url: str, ssl_context: ssl.SSLContext | None = None) -> None:
        u = urlsplit(url)
        if u.scheme not in ("http", "https"):
            raise HTTPError(f"unsupported URL scheme {u.scheme!r}")
        self.host = u.hostname or ""
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.tls = ssl_context or shared_ssl_context() if u.scheme == "https" else None
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = self.port == (443 if u.scheme == "https" else 80)
        self.host_header = host if default else f"{host}:{self.port}"


class _Closed(Exception):
    """The server closed a reused connection before answering (retry once, fresh)."""


def _no_body(data: bytes) -> None:
    raise HTTPError("body bytes before a head")  # unreachable: the states forbid it


class _Wire(asyncio.Protocol):
    """One TCP connection and the exchange in flight on it, parsed as its bytes arrive."""

    def __init__(self, max_bytes: int, deadlines: Deadlines) -> None:
        self.deadlines = deadlines  # its loop's: looked up once a connection, not a request
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.connecting: asyncio.Task[object] | None = None
        self.expired = False  # the deadline passed while connecting
        self.expired_late = False  # ... and the loop reached it late (SentinelLate)
        self.waiter: asyncio.Future[Response | CodedAnswer] | None = None
        self.sink: Callable[[bytes], None] | None = None
        self.max_bytes = max_bytes
        self.got_bytes = False
        self.reused = False
        self.exchange = 0  # numbers the requests: a deadline is for one of them
        self._reset()

    def _reset(self) -> None:
        self.buf = b""
        self.state = _HEAD
        self.left = 0
        self.head: tuple[int, str, dict[str, str], bool] = (0, "", {}, False)
        self.decoder: Decoder | None = None
        self.raw: RawBody | None = None  # a coded body kept whole: decoded by the caller
        self.feed: Callable[[bytes], None] = _no_body  # where the body's bytes go

    # -- asyncio.Protocol ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.waiter is None or self.waiter.done():
            self.close()  # bytes nobody asked for: the connection cannot be trusted
            return
        self.got_bytes = True
        try:
            self._parse(data)
        except Exception as exc:  # noqa: BLE001 (framing, decoding, size, or the sink's verdict)
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.transport = None
        if self.waiter is None or self.waiter.done():
            return
        if self.state == _UNTIL_CLOSE and exc is None:
            try:
                self._finish()
            except Exception as err:  # noqa: BLE001
                self._fail(err)
            return
        if not self.got_bytes and self.reused:
            self.waiter.set_exception(_Closed())
        else:
            self.waiter.set_exception(HTTPError("server closed the connection mid-response"
                                                if self.got_bytes else
                                                f"connection failed: {exc or 'closed'}"))

    # -- the exchange --------------------------------------------------------------

    async def connect(self, loop: asyncio.AbstractEventLoop, host: str, port: int,
                      tls: ssl.SSLContext | None, deadline: float | None,
                      server_name: str | None = None) -> None:
        """Open the connection (TLS included); TimeoutError at `deadline`, as an exchange.

        `server_name`: the name the certificate must carry (SNI), when not the host's.
        """
        opening = loop.create_connection(
            lambda: self, host, port, ssl=tls,
            server_hostname=(server_name or host) if tls is not None else None)
        if deadline is not None:  # bounded by the exchanges' timer: its entry cancels the task
            self.connecting = loop.create_task(opening)
            self.exchange += 1
            self.deadlines.add(deadline, self, self.exchange)
        try:
            await (opening if self.connecting is None else self.connecting)
            return
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not self.expired or (current is not None and current.cancelling()):
                raise  # our caller was cancelled: the task went with it
        except OSError as e:  # TimeoutError too: the system's, not the deadline
            raise HTTPError(f"connection failed: {e.strerror or e}") from None
        finally:
            self.connecting = None
        raise SentinelLate if self.expired_late else TimeoutError  # the deadline cancelled it

    def send(self, request: bytes, sink: Callable[[bytes], None] | None,
             loop: asyncio.AbstractEventLoop, deadline: float | None = None,
             ) -> asyncio.Future[Response | CodedAnswer]:
        assert self.transport is not None
        self._reset()
        self.sink = sink
        self.got_bytes = False
        self.waiter = waiter = loop.create_future()
        self.exchange += 1
        if deadline is not None:
            self.deadlines.add(deadline, self, self.exchange)
        self.transport.write(request)
        return waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
            self.transport = None

    def in_flight(self) -> bool:
        if self.connecting is not None:
            return not self.connecting.done()
        return self.waiter is not None and not self.waiter.done()

    def expire(self, late: bool = False) -> None:
        """The deadline passed: fail the exchange (or the connect) with TimeoutError.

        `late`: the loop reached the deadline late (Sentinel was behind): `SentinelLate`.
        """
        if self.connecting is not None:
            self.expired = True
            self.expired_late = late
            self.connecting.cancel()
            return
        self._fail(SentinelLate() if late else TimeoutError())

    def _fail(self, exc: BaseException) -> None:
        self.close()
        waiter, self.waiter = self.waiter, None
        self._drop_body()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _drop_body(self) -> None:
        # Keep nothing of an answer until the next one: a scraped page is ~40 KB
        # decoded plus zlib's 32 KB window, for a whole interval, per connection.
        self.decoder, self.raw, self.sink, self.feed = None, None, None, _no_body

    def _finish(self) -> None:
        assert self.decoder is not None and self.waiter is not None
        status, reason, headers, keep = self.head
        result: Response | CodedAnswer
        if self.raw is not None:
            result = CodedAnswer(status, reason, headers, self.decoder, self.raw.parts)
        else:
            result = Response(status, reason, headers, self.decoder.finish())
        waiter = self.waiter
        # Inlined `_drop_body` (this runs once a request).
        self.waiter = self.decoder = self.raw = self.sink = None
        self.feed = _no_body
        self.state = _HEAD
        if not keep:
            self.close()
        if not waiter.done():
            waiter.set_result(result)

    def _parse(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        self.buf = b""
        while buf and self.waiter is not None and not self.waiter.done():
            if self.state == _CHUNK_SIZE:
                buf = self._whole_chunks(buf)
                if not buf:
                    break
            buf = self._step(buf)

    def _whole_chunks(self, buf: bytes) -> bytes:
        """Take every whole, well-formed data chunk at the start of `buf` in one pass, and
        give the decoder their data at once; the rest (a last chunk, a piece of one, or
        anything odd) is left to `_step`. A streamed answer is mostly such chunks (one
        event each): walking them by index copies no bytes twice and calls the sink once.
        """
        pos, pieces = 0, []
        while True:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                break
            try:
                size = int(buf[pos:nl].split(b";", 1)[0].strip(), 16)
            except ValueError:
                break  # `_step` says what is wrong with it
            end = nl + 1 + size
            if size <= 0 or buf[end:end + 2] != b"\r\n":
                break
            pieces.append(buf[nl + 1:end])
            pos = end + 2
        if not pieces:
            return buf
        self.feed(b"".join(pieces) if len(pieces) > 1 else pieces[0])
        return buf[pos:]

    def _step(self, buf: bytes) -> bytes:
        """Consume what the current state can from `buf`; the rest (b"" when waiting)."""
        state = self.state
        if state == _LENGTH or state == _CHUNK_DATA:
            take = buf[:self.left]
            self.left -= len(take)
            self.feed(take)
            if not self.left:
                if state == _LENGTH:
                    self._finish()
                else:
                    self.state = _CHUNK_END
            return buf[len(take):]
        if state == _UNTIL_CLOSE:
            self.feed(buf)
            return b""
        if state == _HEAD:
            end = buf.find(b"\r\n\r\n")
            if end < 0 or end > MAX_HEAD:
                return self._wait(buf, MAX_HEAD, "response headers too large")
            self._begin(buf[:end + 4])
            return buf[end + 4:]
        end = buf.find(b"\n")
        if end < 0 or end > _MAX_LINE:
            return self._wait(buf, _MAX_LINE, "chunk line too long")
        line, rest = buf[:end + 1], buf[end + 1:]
        if state == _CHUNK_SIZE:
            size_text = line.split(b";", 1)[0].strip()
            try:
                self.left = int(size_text, 16)
            except ValueError:
                raise HTTPError(f"bad chunk size {size_text[:20]!r}") from None
            self.state = _CHUNK_DATA if self.left else _TRAILER
        elif state == _CHUNK_END:
            if line not in (b"\r\n", b"\n"):
                raise HTTPError("chunk not followed by CRLF")
            self.state = _CHUNK_SIZE
        elif line in (b"\r\n", b"\n"):  # _TRAILER: the blank line ends the message
            self._finish()
        return rest

    def _wait(self, buf: bytes, limit: int, too_long: str) -> bytes:
        if len(buf) > limit:
            raise HTTPError(too_long)
        self.buf = buf
        return b""

    def _begin(self, head: bytes) -> None:
        self.head = status, _, headers, _ = parse_head(head)
        if status != 200:  # do not spend time draining an error page
            self.close()
            assert self.waiter is not None
            self.waiter.set_result(Response(status, self.head[1], headers, b""))
            return
        self.decoder = decoder = Decoder(codings(headers.get("content-encoding", "")),
                                         self.max_bytes, self.sink)
        if self.sink is None and not decoder.plain:
            # Decoded by the caller's task, not here: every answer that arrives in one
            # turn of the loop is framed here before any caller runs, so decoding here
            # would hold all their pages at once (50 scrapes a slot: 2 MB of heap grown
            # and trimmed again each slot, ~10 page faults a scrape, 15 % more CPU).
            self.raw = RawBody(self.max_bytes)
            self.feed = self.raw.feed
        else:
            self.feed = decoder.feed
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.state = _CHUNK_SIZE
            return
        length = headers.get("content-length")
        if length is None:
            self.state = _UNTIL_CLOSE
            return
        if not length.isdigit():
            raise HTTPError(f"bad Content-Length {length!r}")
        self.left = int(length)
        if self.left > self.max_bytes and (decoder.plain or self.raw is not None):
            # Refused before it is read: its bytes alone would pass the limit.
            raise BodyTooLarge(f"body size limit exceeded: {self.left} > {self.max_bytes} bytes")
        self.state = _LENGTH
        if not self.left:
            self._finish()



class Connection:
    """One kept-alive HTTP/1.1 connection to one origin; one request at a time."""

    def __init__(self, url: str, ssl_context: ssl.SSLContext | None = None,
                 server_name: str | None = None) -> None:
        origin = _Origin(url, ssl_context)  # parses and checks the URL, picks TLS
        self.host, self.port, self.tls = origin.host, origin.port, origin.tls
        self.server_name = server_name  # a TLS server name other than the host's
        self.opened = 0  # connections opened so far (keep-alive shows as 1)
        self._wire: _Wire | None = None
        self._busy = False  # a request is on the connection
        self._free: asyncio.Future[None] | None = None  # set when it ends, if anyone waits

    async def get(self, request: bytes, max_bytes: int,
                  sink: Callable[[bytes], None] | None = None,
                  deadline: float | None = None) -> Response:
        """Send a prepared request (see `build_request`) and read the answer.

        With `sink`, a 200's decoded body is handed to it piece by piece as it
        arrives (the returned body is then empty). Raises HTTPError (its
        message says what failed), or TimeoutError at `deadline` (the loop's
        time), connecting included. The connection is closed on any failure.
        """
        while self._busy:  # rare: another caller's request is on it; wait for its end
            if self._free is None:
                self._free = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._free)  # a waiter cancelled leaves it to the others
        self._busy = True  # a flag, not an asyncio.Lock: ~0.8 µs less a request
        try:
            return await self._get(request, max_bytes, sink, deadline)
        finally:
            self._busy = False
            free, self._free = self._free, None
            if free is not None and not free.done():
                free.set_result(None)

    async def _get(self, request: bytes, max_bytes: int,
                   sink: Callable[[bytes], None] | None, deadline: float | None) -> Response:
        try:
            return await self._exchange(request, max_bytes, sink, deadline)
        except _Closed:  # the server closed the idle connection as we reused it
            pass
        except BaseException:
            self.close()
            raise
        try:
            return await self._exchange(request, max_bytes, sink, deadline)
        except _Closed:
            self.close()
            raise HTTPError("connection failed: closed by the server") from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Drop the connection (the next request opens a new one)."""
        if self._wire is not None:
            try:
                self._wire.close()
            except RuntimeError:  # its loop is already closed: nothing left to close
                pass
            self._wire = None

    async def _exchange(self, request: bytes, max_bytes: int,
                        sink: Callable[[bytes], None] | None,
                        deadline: float | None) -> Response:
        loop = asyncio.get_running_loop()
        wire = self._wire
        if wire is None or wire.closed:
            self._wire = None
            wire = _Wire(max_bytes, deadlines(loop))
            await wire.connect(loop, self.host, self.port, self.tls, deadline, self.server_name)
            self._wire = wire
            self.opened += 1
        else:
            wire.reused = True
        wire.max_bytes = max_bytes
        got = await wire.send(request, sink, loop, deadline)
        return got.decode() if isinstance(got, CodedAnswer) else got

