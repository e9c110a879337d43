"""The HTTP/1.1 client's wire, scripted byte by byte: framing, keep-alive, errors, deadlines.

A raw loopback server sends each answer in pieces cut at awkward places
(inside the head, a chunk-size line, a CRLF, a multi-byte character), a
few milliseconds apart so each piece is its own read. `Connection` must
give the same status, body, sink pieces and errors however the answer is
cut. (These cases once compared the scrapes' StreamReader client with the
probes' protocol one, answer for answer; the two are now this one.)
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator

import pytest

from sentinel.collect.http1 import BodyTooLarge, Connection, HTTPError, build_request

pytestmark = pytest.mark.integration
BODY = ("data: ünï " * 150).encode()


def chunked(body: bytes, size: int = 100, ext: bool = False) -> bytes:
    out = b""
    for i in range(0, len(body), size):
        piece = body[i:i + size]
        out += b"%x%s\r\n%s\r\n" % (len(piece), b";x=y" if ext else b"", piece)
    return out + b"0\r\nX-Trailer: 1\r\n\r\n"


def cut(data: bytes, step: int, fine: int = 400) -> list[bytes]:
    """`step`-byte pieces for the first `fine` bytes (head, first chunks), then 1,000s."""
    fine = min(fine, len(data))
    return ([data[i:min(i + step, fine)] for i in range(0, fine, step)]
            + [data[i:i + 1000] for i in range(fine, len(data), 1000)])


GATE_S = 30.0  # how long a gate in an answer holds the rest back at most


class RawServer:
    """Answers each request with the next scripted answer: (pieces, close after).

    A `threading.Event` among the pieces is a gate: the rest waits until the test sets it
    (an event, not a pause: a loaded machine cannot reorder it). `gates` records, per
    gate, whether it was set in time."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.answers: list[tuple[list[bytes | threading.Event], bool]] = []
        self.connections = 0
        self.requests = 0
        self.gates: list[bool] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(ConnectionError):  # a client that gave up hangs up
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                self.requests += 1
                pieces, close = self.answers.pop(0)
                for piece in pieces:
                    if isinstance(piece, threading.Event):
                        self.gates.append(piece.wait(GATE_S))
                        continue
                    conn.sendall(piece)
                    time.sleep(0.003)
                if close:
                    return

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw() -> Iterator[RawServer]:
    s = RawServer()
    yield s
    s.close()


def exchange(url: str, answers: int = 1, max_bytes: int = 1 << 20,
             sink: bool = False) -> tuple[list[object], int]:
    """`answers` requests on one connection: each (status, body, sink bytes) or the error."""
    async def go() -> tuple[list[object], int]:
        loop = asyncio.get_running_loop()
        conn = Connection(url)
        req = build_request(url, "/x", {"Accept": "*/*"}, "POST", b'{"a":1}')
        out: list[object] = []
        for _ in range(answers):
            pieces: list[bytes] = []
            try:
                resp = await conn.get(req, max_bytes, pieces.append if sink else None,
                                      deadline=loop.time() + 60)  # generous: a loaded machine
                out.append((resp.status, resp.body, b"".join(pieces)))
            except HTTPError as exc:
                out.append((type(exc).__name__, str(exc)))
        conn.close()
        return out, conn.opened
    return asyncio.run(go())


def run(raw: RawServer, script: list[tuple[list[bytes], bool]], **kw: object) -> list[object]:
    """The answers to a script of answers, one request each on one connection."""
    raw.answers = list(script)
    return exchange(raw.url, answers=len(script), **kw)[0]  # type: ignore[arg-type]


HEAD_LEN = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n"
HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("step", [1, 7, 100, 100_000])
def test_content_length_and_chunked_bodies_read_whole_however_they_are_cut(raw, step):
    plain = HEAD_LEN % len(BODY) + BODY
    chunks = HEAD_CHUNKED + chunked(BODY, 333, ext=True)
    for sink in (False, True):
        got = run(raw, [(cut(plain, step), False), (cut(chunks, step), False)], sink=sink)
        for status, body, sunk in got:  # type: ignore[misc]
            assert status == 200 and (sunk if sink else body) == BODY


def test_a_kept_alive_connection_is_reused_and_an_empty_body_ends_at_once(raw):
    raw.answers = [([HEAD_LEN % 0], False)] * 3
    got, opened = exchange(raw.url, answers=3)
    assert got == [(200, b"", b"")] * 3 and opened == 1 and raw.connections == 1


def test_a_body_framed_by_the_close_and_stacked_codings(raw):
    double = gzip.compress(gzip.compress(BODY))
    got = run(raw, [([b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"] + cut(BODY, 500),
                      True),
                     ([b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip, gzip\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(double)] + cut(double, 50), False)])
    assert got == [(200, BODY, b""), (200, BODY, b"")]


def test_an_error_status_is_answered_without_its_body_and_the_connection_dropped(raw):
    page = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\n\r\nbusy!"
    raw.answers = [([page], False), ([HEAD_LEN % 2 + b"ok"], False)]
    got, opened = exchange(raw.url, answers=2)
    assert got == [(503, b"", b""), (200, b"ok", b"")] and opened == 2


def test_bad_framing_and_a_close_mid_answer_are_errors(raw):
    got = run(raw, [([HEAD_CHUNKED + b"zz\r\nabc"], True)])
    assert got[0][0] == "HTTPError" and "bad chunk size" in got[0][1]  # type: ignore[index]
    got = run(raw, [([HEAD_LEN % 100 + b"only part"], True)])
    assert got == [("HTTPError", "server closed the connection mid-response")]


def test_an_idle_connection_closed_by_the_server_is_retried_once_fresh(raw):
    # The server closes after answering without saying so: the next request on the
    # kept-alive connection finds it closed before any byte and is sent again.
    raw.answers = [([HEAD_LEN % 2 + b"ok"], True), ([HEAD_LEN % 2 + b"ok"], False)]
    got, opened = exchange(raw.url, answers=2)
    assert got == [(200, b"ok", b"")] * 2 and opened == 2


def test_a_compression_bomb_stops_at_the_limit(raw):
    bomb = gzip.compress(gzip.compress(b"\0" * (4 << 20)))
    got = run(raw, [([b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip, gzip\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(bomb), bomb], True)],
               max_bytes=100_000)
    assert got[0][0] == BodyTooLarge.__name__  # type: ignore[index]


def test_the_sink_sees_each_piece_as_it_arrives_not_at_the_end(raw):
    # The canary times its first token from the sink: a piece must reach it before
    # the rest of the answer has come.
    seen: list[bytes] = []
    first_token = threading.Event()

    def sink(piece: bytes) -> None:
        seen.append(piece)
        first_token.set()

    async def go() -> None:
        conn = Connection(raw.url)
        req = build_request(raw.url, "/x", {}, "GET")
        await conn.get(req, 1 << 20, sink, deadline=asyncio.get_running_loop().time() + 60)
        conn.close()

    # The rest of the answer is sent only once the sink saw the first token: a client
    # that kept pieces until the end would hold the gate shut for GATE_S.
    raw.answers = [([HEAD_CHUNKED + b"2\r\nok\r\n", first_token,
                     b"3\r\n ok\r\n0\r\n\r\n"], False)]
    asyncio.run(go())
    assert seen == [b"ok", b" ok"] and raw.gates == [True], (seen, raw.gates)


STALLED = [HEAD_CHUNKED + b"2\r\nok\r\n"] + [b""] * 150 + [b"0\r\n\r\n"]  # ~0.45 s of pauses


def _held(gate: threading.Event) -> list[bytes | threading.Event]:
    """An answer whose end waits for `gate`."""
    return [HEAD_CHUNKED + b"2\r\nok\r\n", gate, b"0\r\n\r\n"]


def test_a_deadline_fails_the_exchange_at_its_time_even_behind_a_later_one(raw):
    # Two exchanges in flight on one loop share the deadlines' timer: the one added
    # second with the earlier deadline must still fail at its own time, not at the
    # first's (SLOW_S later; both answers are held until the second has ended).
    slow_s = 60.0
    release = threading.Event()

    async def go() -> tuple[object, bool, object]:
        loop = asyncio.get_running_loop()
        slow, fast = Connection(raw.url), Connection(raw.url)
        req = build_request(raw.url, "/x", {}, "GET")
        first = asyncio.ensure_future(slow.get(req, 1 << 20, deadline=loop.time() + slow_s))
        until = loop.time() + 30
        while raw.requests < 1 and loop.time() < until:  # the first is in flight
            await asyncio.sleep(0.01)
        try:
            await fast.get(req, 1 << 20, deadline=loop.time() + 0.1)
            second: object = "answered"
        except TimeoutError:
            second = "timed out"
        first_waiting = not first.done()
        release.set()
        resp = await first
        slow.close()
        fast.close()
        return second, first_waiting, resp.status

    raw.answers = [(_held(release), False), (_held(release), False)]
    second, first_waiting, status = asyncio.run(go())
    # Ordering, not a stopwatch: the second failed while the first was still waiting, and
    # the first was then answered, so its own deadline had not come: the second's fired
    # before the first's, at its own time.
    assert second == "timed out" and first_waiting
    assert status == 200  # the first, deadline far off, was answered


def test_an_ended_exchange_s_deadline_never_fails_the_next_one(raw):
    # Its entry stays behind when it ends in time; the connection's next exchange,
    # still running when that deadline passes, must not be failed by it.
    release = threading.Event()

    async def go() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        conn = Connection(raw.url)
        req = build_request(raw.url, "/x", {}, "GET")
        first_deadline = loop.time() + 2  # generous for a two-byte answer on loopback
        first = await conn.get(req, 1 << 20, deadline=first_deadline)
        # The second's answer is held until the first's deadline has passed.
        loop.call_at(first_deadline + 0.2, release.set)
        second = await conn.get(req, 1 << 20, deadline=loop.time() + 60)
        conn.close()
        return first.status, second.status, conn.opened

    raw.answers = [([HEAD_LEN % 2 + b"ok"], False), (_held(release), False)]
    assert asyncio.run(go()) == (200, 200, 1)


def test_many_exchanges_keep_at_most_one_timer_on_the_loop(raw):
    # Another timer, due first, stays at the top of the loop's heap (as the daemon's
    # scrape and probe jobs do): a cancelled timer per exchange would pile up behind it.
    async def go() -> list[int]:
        loop = asyncio.get_running_loop()
        other = loop.call_later(5, lambda: None)
        conn = Connection(raw.url)
        req = build_request(raw.url, "/x", {}, "GET")
        timers = []
        for _ in range(30):
            await conn.get(req, 1 << 20, deadline=loop.time() + 10)
            timers.append(len(loop._scheduled))  # type: ignore[attr-defined]
        conn.close()
        other.cancel()
        return timers

    raw.answers = [([HEAD_LEN % 2 + b"ok"], False)] * 30
    # The other and the deadlines' one: the connect is bounded by that timer too.
    assert max(asyncio.run(go())) == 2


def test_one_deadline_for_the_exchange_passed_none_or_later(raw):
    # The one deadline mechanism, as the scrapes and probes use it: a deadline
    # already passed fails the request with TimeoutError and closes the connection;
    # without one, or with one far off, the request is answered.
    async def go() -> list[object]:
        loop = asyncio.get_running_loop()
        conn = Connection(raw.url)
        req = build_request(raw.url, "/x", {}, "GET")
        got: list[object] = [(await conn.get(req, 1 << 20)).body]
        try:
            await conn.get(req, 1 << 20, deadline=loop.time() - 1)
        except TimeoutError:
            got.append("timed out")
        got.append((await conn.get(req, 1 << 20, deadline=loop.time() + 30)).body)
        conn.close()
        return got + [conn.opened]

    raw.answers = [([HEAD_LEN % 2 + b"ok"], False), (STALLED, False),
                   ([HEAD_LEN % 2 + b"ok"], False)]
    assert asyncio.run(go()) == [b"ok", "timed out", b"ok", 2]


class SilentServer:
    """Accepts connections and never says a byte: a TLS handshake to it never ends."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    s = SilentServer()
    yield s
    s.close()


def test_the_deadline_bounds_the_connect_too(silent):
    # The TLS handshake is part of connecting: a server that never answers it must
    # not hold the request past its deadline.
    async def go() -> BaseException | None:
        loop = asyncio.get_running_loop()
        url = f"https://127.0.0.1:{silent.sock.getsockname()[1]}"
        conn = Connection(url)
        task = asyncio.ensure_future(conn.get(build_request(url, "/x", {}, "GET"), 1 << 20,
                                              deadline=loop.time() + 0.2))
        done, _ = await asyncio.wait({task}, timeout=30)  # the test's own bound, generous
        conn.close()
        assert done, "the connect outlived its deadline"
        return task.exception()

    assert isinstance(asyncio.run(go()), TimeoutError)


def test_a_caller_cancelled_while_connecting_is_cancelled_not_timed_out(silent):
    async def go() -> None:
        loop = asyncio.get_running_loop()
        url = f"https://127.0.0.1:{silent.sock.getsockname()[1]}"
        conn = Connection(url)
        task = asyncio.ensure_future(conn.get(build_request(url, "/x", {}, "GET"), 1 << 20,
                                              deadline=loop.time() + 30))
        until = loop.time() + 30
        while not silent.held and loop.time() < until:  # TCP is up; the handshake hangs
            await asyncio.sleep(0.01)
        assert silent.held and not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        conn.close()

    asyncio.run(go())


def test_two_requests_at_once_on_one_connection_take_turns(raw):
    # One request at a time on a connection: a second caller waits for the first's
    # answer instead of writing its request into the middle of it.
    async def go() -> tuple[list[bytes], int]:
        loop = asyncio.get_running_loop()
        conn = Connection(raw.url)
        req = build_request(raw.url, "/x", {}, "GET")
        answers = await asyncio.gather(*(conn.get(req, 1 << 20, deadline=loop.time() + 10)
                                         for _ in range(2)))
        conn.close()
        return [a.body for a in answers], conn.opened

    raw.answers = [(cut(HEAD_LEN % len(BODY) + BODY, 50), False),
                   ([HEAD_LEN % 2 + b"ok"], False)]
    assert asyncio.run(go()) == ([BODY, b"ok"], 1)


def test_a_caller_cancelled_while_waiting_its_turn_leaves_the_others_theirs(raw):
    async def go() -> tuple[list[object], int]:
        loop = asyncio.get_running_loop()
        conn = Connection(raw.url)
        req = build_request(raw.url, "/x", {}, "GET")
        calls = [asyncio.ensure_future(conn.get(req, 1 << 20, deadline=loop.time() + 10))
                 for _ in range(3)]
        await asyncio.sleep(0)  # all three started: the first sent, two wait their turn
        calls[1].cancel()
        got = await asyncio.gather(*calls, return_exceptions=True)
        conn.close()
        return [g.body if hasattr(g, "body") else type(g).__name__ for g in got], conn.opened

    raw.answers = [(cut(HEAD_LEN % len(BODY) + BODY, 50), False),
                   ([HEAD_LEN % 2 + b"ok"], False)]
    assert asyncio.run(go()) == ([BODY, "CancelledError", b"ok"], 1)


def test_an_endless_head_or_chunk_line_is_refused_at_its_limit(raw):
    head = b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 70_000 + b"\r\n\r\n"
    line = HEAD_CHUNKED + b"1" * 5_000 + b"\r\n"
    got = run(raw, [([head], True), ([line], True)])
    assert got == [("HTTPError", "response headers too large"),
                   ("HTTPError", "chunk line too long")]


def test_a_close_answer_or_an_http_1_0_one_is_not_reused(raw):
    close = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
    old = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"
    old_kept = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"
    raw.answers = [([close], True), ([old], True), ([old_kept], False), ([old_kept], False)]
    got, opened = exchange(raw.url, answers=4)
    assert got == [(200, b"ok", b"")] * 4 and opened == 3


def test_a_connection_keeps_nothing_of_an_answer_once_it_is_read(raw):
    # A kept-alive connection waits a whole interval for its next request: holding
    # the last page (decoded parts, zlib's window) that long costs ~75 KB a target.
    page = b"x 1\n" * 500_000  # 2 MB decoded
    body = gzip.compress(page)

    async def go() -> int:
        loop = asyncio.get_running_loop()
        conn = Connection(raw.url)
        req = build_request(raw.url, "/x", {}, "GET")
        tracemalloc.start()
        try:
            resp = await conn.get(req, 10 << 20, deadline=loop.time() + 10)
            assert resp.body == page
            del resp
            await asyncio.sleep(0)  # the loop's handle that woke us holds the answer until then
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        conn.close()
        return held

    raw.answers = [([b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body), body], False)]
    held = asyncio.run(go())
    assert held < len(page) // 4, f"{held} bytes still held after the answer was dropped"


def test_a_coded_body_is_refused_past_the_limit_on_the_wire_too(raw):
    # Empty gzip members decode to nothing: without a bound on the wire bytes a
    # server could stream them until the deadline, all kept for the decoding.
    empty = gzip.compress(b"") * 2_000  # ~40 KB on the wire, 0 bytes decoded
    coded = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n"
    got = run(raw, [([coded + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(empty, 4096)],
                     False),
                    ([coded + b"Content-Length: %d\r\n\r\n" % len(empty)], True)],
              max_bytes=10_000)
    assert got == [("BodyTooLarge", "body size limit exceeded: more than 10000 bytes"),
                   ("BodyTooLarge", f"body size limit exceeded: {len(empty)} > 10000 bytes")]
