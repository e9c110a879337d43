"""An HTTP/1.1 connection whose answers are parsed as their bytes arrive, in the protocol.

The probes' transport. `http1.Connection` reads through an
`asyncio.StreamReader`: every piece of a streamed answer (the canary's
head, first token, last token) wakes the reading coroutine, which walks
`readline`/`read` and its own call chain again. At 1,000 idle targets
that is ~130 probe requests a second, and the machinery cost more than the
probes' own logic. Here `data_received` frames the body itself (Content-
Length, chunked, or the close) and hands the decoded bytes to the sink at
once, so an exchange wakes its caller once, when it is complete.

Same contract as `http1.Connection.get`: a prepared request (`build_request`),
a 200's body to the `sink` as it arrives (or kept), a non-200 answered
with its status and the connection closed, `Content-Encoding` decoded with
the size limit (`http1.Decoder`), keep-alive with one retry on a fresh
connection when a reused one was closed by the server before any byte of
the answer, and the connection closed on any error or cancellation.

An exchange may carry its deadline (`get(..., deadline=)`, in loop time):
it fails with TimeoutError then, as `asyncio.timeout` around the call
would, without the Timeout context and task cancelling that needs at every
request. The deadlines of all exchanges on a loop share one timer
(`_Deadlines`): an exchange that ends in time leaves its entry behind
instead of cancelling a timer of its own, so a request costs a push onto
a heap of plain tuples, not a `TimerHandle` armed, cancelled and left in
the loop's heap (~1,300 of them at 1,000 probed targets, each compared in
Python at every push and pop). The caller may still bound an exchange
with `asyncio.timeout` instead.
"""

from __future__ import annotations

import asyncio
import heapq
import ssl
import weakref
from collections.abc import Callable

from sentinel.collect.http1 import (
    Connection,
    Decoder,
    HTTPError,
    Response,
    parse_head,
)

MAX_HEAD = 64 * 1024
_MAX_LINE = 4 * 1024  # a chunk-size line (with extensions) or a trailer
_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _LENGTH, _UNTIL_CLOSE = range(7)


class _Deadlines:
    """The deadlines of every exchange on one loop, behind at most one timer.

    An entry is (when, sequence, wire, exchange number); the wire's exchange
    number moves on with each request, so an entry whose exchange has ended
    is dead and is dropped when reached. The timer is armed for the first
    live entry: on firing it fails the exchanges that are due and drops the
    dead entries ahead of the next live one, so it fires about once a
    timeout while exchanges end in time, not once a request.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.heap: list[tuple[float, int, _Wire, int]] = []
        self.seq = 0
        self.timer: asyncio.TimerHandle | None = None
        self.armed_at = float("inf")

    def add(self, when: float, wire: _Wire, exchange: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, self.seq, wire, exchange))
        if when < self.armed_at:
            self._arm(when)

    def _arm(self, when: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.armed_at = when
        self.timer = self.loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self.timer, self.armed_at = None, float("inf")
        now, heap = self.loop.time(), self.heap
        while heap:
            when, _, wire, exchange = heap[0]
            live = wire.exchange == exchange and wire.in_flight()
            if live and when > now:
                self._arm(when)
                return
            heapq.heappop(heap)
            if live:
                wire.expire()


_DEADLINES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Deadlines] = (
    weakref.WeakKeyDictionary())


def _deadlines(loop: asyncio.AbstractEventLoop) -> _Deadlines:
    found = _DEADLINES.get(loop)
    if found is None:
        found = _DEADLINES[loop] = _Deadlines(loop)
    return found


class _Closed(Exception):
    """The server closed a reused connection before answering (retry once, fresh)."""


class _Wire(asyncio.Protocol):
    """One TCP connection and the exchange in flight on it."""

    def __init__(self, max_bytes: int, deadlines: _Deadlines) -> None:
        self.deadlines = deadlines  # its loop's: looked up once a connection, not a request
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.waiter: asyncio.Future[Response] | None = None
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

    def send(self, request: bytes, sink: Callable[[bytes], None] | None,
             loop: asyncio.AbstractEventLoop, deadline: float | None = None,
             ) -> asyncio.Future[Response]:
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
        return self.waiter is not None and not self.waiter.done()

    def expire(self) -> None:
        """The exchange's deadline passed: fail it with TimeoutError."""
        self._fail(TimeoutError())

    def _fail(self, exc: BaseException) -> None:
        self.close()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    def _finish(self) -> None:
        assert self.decoder is not None and self.waiter is not None
        status, reason, headers, keep = self.head
        body = self.decoder.finish()
        self.state = _HEAD
        if not keep:
            self.close()
        if not self.waiter.done():
            self.waiter.set_result(Response(status, reason, headers, body))

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
        assert self.decoder is not None
        self.decoder.feed(b"".join(pieces) if len(pieces) > 1 else pieces[0])
        return buf[pos:]

    def _step(self, buf: bytes) -> bytes:
        """Consume what the current state can from `buf`; the rest (b"" when waiting)."""
        state = self.state
        if state == _LENGTH or state == _CHUNK_DATA:
            take = buf[:self.left]
            self.left -= len(take)
            assert self.decoder is not None
            self.decoder.feed(take)
            if not self.left:
                if state == _LENGTH:
                    self._finish()
                else:
                    self.state = _CHUNK_END
            return buf[len(take):]
        if state == _UNTIL_CLOSE:
            assert self.decoder is not None
            self.decoder.feed(buf)
            return b""
        if state == _HEAD:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return self._wait(buf, MAX_HEAD, "response headers too large")
            self._begin(buf[:end + 4])
            return buf[end + 4:]
        end = buf.find(b"\n")
        if end < 0:
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
        codings = [c.strip().lower() for c in headers.get("content-encoding", "").split(",")
                   if c.strip()]
        self.decoder = Decoder(codings, self.max_bytes, self.sink)
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
        if not codings and self.left > self.max_bytes:
            raise HTTPError(f"body size limit exceeded: {self.left} > {self.max_bytes} bytes")
        self.state = _LENGTH
        if not self.left:
            self._finish()


class WireConnection:
    """One kept-alive HTTP/1.1 connection to one origin, answers parsed in the protocol."""

    def __init__(self, url: str, ssl_context: ssl.SSLContext | None = None) -> None:
        origin = Connection(url, ssl_context)  # parses and checks the URL, picks TLS
        self.host, self.port, self.tls = origin.host, origin.port, origin.tls
        self.opened = 0  # connections opened so far (keep-alive shows as 1)
        self._wire: _Wire | None = None

    async def get(self, request: bytes, max_bytes: int,
                  sink: Callable[[bytes], None] | None = None,
                  deadline: float | None = None) -> Response:
        """Send a prepared request and read the answer (see the module docstring);
        TimeoutError at `deadline` (the loop's time), connecting included."""
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
            wire = _Wire(max_bytes, _deadlines(loop))
            try:
                async with asyncio.timeout_at(deadline):
                    await loop.create_connection(lambda: wire, self.host, self.port,
                                                 ssl=self.tls)
            except OSError as e:
                raise HTTPError(f"connection failed: {e.strerror or e}") from None
            self._wire = wire
            self.opened += 1
        else:
            wire.reused = True
        wire.max_bytes = max_bytes
        return await wire.send(request, sink, loop, deadline)
