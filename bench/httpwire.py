"""Which HTTP/1 wire is faster: CPU per answer of each client implementation, same workload.

Run: `python bench/httpwire.py [--against cb5934f] [--repeat 5] [--conns 50] [--rounds 20]`.

Sentinel has one HTTP/1 client for scrapes and probes, `sentinel.collect.http1`.
With `--against COMMIT` (cb5934f: the last before the merge) the same run
also measures the two it replaced, loaded from git beside it: the scrapes'
StreamReader client and the probes' protocol one. Every implementation is
measured interleaved, repeat by repeat (machine noise hits each alike); the
figure is this process's CPU time per answer (`time.process_time`), median
and best of the repeats, and each one's ratio to this tree's. Two measures:

  * parse: answers already in memory handed to the client's parser in 64 KB
    reads (as a loopback socket delivers them), no socket: the vLLM page
    (tests/data/vllm_metrics.txt, 42 KB) framed by Content-Length or chunked
    (4 KB chunks), plain or gzip, and a streamed canary answer (server-sent
    events, chunked, one read per event, body to a sink);
  * round trip: the same answers over kept-alive loopback connections to a
    helper process (its CPU is not counted), `--conns` connections with one
    request each in flight per round, bounded by a deadline as the scrapes and
    probes bound theirs; the canary's events are sent 1 ms apart, so each is
    its own read, as a model's tokens are.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import gzip
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "tests" / "data" / "vllm_metrics.txt").read_bytes()
MAX_BYTES = 10 << 20
READ = 64 * 1024


def _event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    doc = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
           "model": "m", "choices": [choice]}
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


# A vLLM canary answer at max_tokens 2: role, two tokens, finish, usage, [DONE].
EVENTS = [_event({"role": "assistant", "content": ""}), _event({"content": "ok"}),
          _event({"content": "."}), _event({}, "length"),
          b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}\n\n',
          b"data: [DONE]\n\n"]


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _answer(body: bytes, chunked: bool, coding: str = "", ctype: str = "text/plain") -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\n"
    if coding:
        head += f"Content-Encoding: {coding}\r\n"
    if not chunked:
        return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    chunks = b"".join(_chunk(body[i:i + 4096]) for i in range(0, len(body), 4096))
    return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunks + b"0\r\n\r\n"


def shapes() -> dict[str, list[bytes]]:
    """Each answer as the reads that bring it: name -> pieces."""
    zipped = gzip.compress(PAGE, 6)
    out = {}
    for name, body, chunked, coding in [
            ("length plain", PAGE, False, ""), ("length gzip", zipped, False, "gzip"),
            ("chunked plain", PAGE, True, ""), ("chunked gzip", zipped, True, "gzip")]:
        raw = _answer(body, chunked, coding)
        out[name] = [raw[i:i + READ] for i in range(0, len(raw), READ)]
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    out["canary sse"] = [head] + [_chunk(e) for e in EVENTS] + [b"0\r\n\r\n"]
    return out


PATHS = {name: "/" + name.replace(" ", "-") for name in shapes()}


# -- the helper that answers (its own process) ------------------------------------------------

async def _serve() -> None:
    answers = {PATHS[name].encode(): pieces for name, pieces in shapes().items()}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                pieces = answers[head.split(b" ", 2)[1]]
                if len(pieces) > 3:  # the canary: one write per event, 1 ms apart
                    for piece in pieces:
                        writer.write(piece)
                        await writer.drain()
                        await asyncio.sleep(0.001)
                else:
                    writer.write(b"".join(pieces))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)
    await server.serve_forever()


# -- the implementations -----------------------------------------------------------------------

class _NullTransport(asyncio.Transport):
    def write(self, data: Any) -> None:
        pass

    def abort(self) -> None:
        pass


@dataclass
class Impl:
    """One client implementation: how to parse answers in memory and how to send a request."""

    name: str
    parse: Callable[[list[bytes], bool, int], Awaitable[None]]
    connect: Callable[[str], Any]
    get: Callable[[Any, bytes, Callable[[bytes], None] | None], Awaitable[Any]]


def implementations(against: str | None) -> list[Impl]:
    """This tree's wire, and with `against` the two wires of that older commit."""
    from sentinel.collect import http1
    from sentinel.collect.deadlines import deadlines

    found = [_protocol_impl("http1 (this tree)",
                            lambda loop: http1._Wire(MAX_BYTES, deadlines(loop)),
                            http1.Connection)]
    return found + (_older(against) if against else [])


def _older(rev: str) -> list[Impl]:
    """The scrapes' StreamReader client and the probes' protocol client as they were at `rev`
    (any commit before the merge, e.g. cb5934f), loaded beside this tree's modules."""
    import importlib
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="httpwire-"))
    for name in ("http1", "httpwire"):
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:sentinel/collect/{name}.py"],
                              capture_output=True, text=True, check=True).stdout
        text = text.replace("from sentinel.collect.http1 import", "from old_http1 import")
        (where / f"old_{name}.py").write_text(text)
    sys.path.insert(0, str(where))
    old_http1 = importlib.import_module("old_http1")
    old_wire = importlib.import_module("old_httpwire")
    return [_stream_impl(old_http1, f"StreamReader @{rev[:7]}"),
            _protocol_impl(f"httpwire @{rev[:7]}",
                           lambda loop: old_wire._Wire(MAX_BYTES, old_wire._deadlines(loop)),
                           old_wire.WireConnection)]


def _stream_impl(http1: Any, name: str) -> Impl:
    async def parse(pieces: list[bytes], sink: bool, n: int) -> None:
        kept: list[bytes] = []
        for _ in range(n):
            reader = asyncio.StreamReader(limit=READ)
            for piece in pieces:
                reader.feed_data(piece)
            _, _, headers, _ = await http1._read_head(reader)
            codings = http1._codings(headers.get("content-encoding", ""))
            decoder = http1.Decoder(codings, MAX_BYTES, kept.append if sink else None)
            await http1._read_body(reader, headers, decoder, MAX_BYTES)
            decoder.finish()
            kept.clear()

    async def get(conn: Any, req: bytes, sink: Callable[[bytes], None] | None) -> Any:
        async with asyncio.timeout(10):  # as the scrapes bounded it
            return await conn.get(req, MAX_BYTES, sink)

    return Impl(name, parse, http1.Connection, get)


def _protocol_impl(name: str, make_wire: Callable[[asyncio.AbstractEventLoop], Any],
                   conn_class: Any) -> Impl:
    async def parse(pieces: list[bytes], sink: bool, n: int) -> None:
        loop = asyncio.get_running_loop()
        wire = make_wire(loop)
        wire.transport = _NullTransport()
        kept: list[bytes] = []
        for _ in range(n):
            done = wire.send(b"", kept.append if sink else None, loop)
            for piece in pieces:
                wire.data_received(piece)
            got = done.result()
            if hasattr(got, "decode"):  # a coded body the caller's task decodes
                got.decode()
            kept.clear()

    async def get(conn: Any, req: bytes, sink: Callable[[bytes], None] | None) -> Any:
        deadline = asyncio.get_running_loop().time() + 10
        return await conn.get(req, MAX_BYTES, sink, deadline)

    return Impl(name, parse, conn_class, get)


# -- the measures ------------------------------------------------------------------------------

async def parse_cpu(impl: Impl, pieces: list[bytes], sink: bool, n: int) -> float:
    """CPU µs per answer parsed from memory."""
    await impl.parse(pieces, sink, 20)  # warm up
    gc.collect()
    start = time.process_time()
    await impl.parse(pieces, sink, n)
    return 1e6 * (time.process_time() - start) / n


async def round_trip_cpu(impl: Impl, url: str, path: str, sink: bool, conns: int,
                         rounds: int) -> float:
    """CPU µs per request/answer over `conns` kept-alive connections, `rounds` times each."""
    from sentinel.collect.http1 import build_request

    clients = [impl.connect(url) for _ in range(conns)]
    req = build_request(url, path, {"Accept-Encoding": "gzip"})
    got: list[int] = []

    async def one(c: Any) -> None:
        pieces: list[bytes] = []
        resp = await impl.get(c, req, pieces.append if sink else None)
        got.append(len(resp.body) + sum(map(len, pieces)))

    try:
        await asyncio.gather(*(one(c) for c in clients))  # connect, warm up
        gc.collect()
        start = time.process_time()
        for _ in range(rounds):
            await asyncio.gather(*(one(c) for c in clients))
        cpu = time.process_time() - start
    finally:
        for c in clients:
            c.close()
    assert min(got) > 500, "short body"
    return 1e6 * cpu / (conns * rounds)


def _table(title: str, results: dict[str, dict[str, list[float]]]) -> None:
    print(title)
    for shape, per_impl in results.items():
        base = statistics.median(next(iter(per_impl.values())))
        for name, runs in per_impl.items():
            med = statistics.median(runs)
            print(f"  {shape:<14} {name:<22} median {med:7.1f} µs  best {min(runs):7.1f} µs"
                  f"  {med / base:5.2f}x   runs: {' '.join(f'{r:.0f}' for r in runs)}")


def main() -> None:
    """Measure every implementation on every shape, interleaved, and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", type=int, default=2000, help="answers parsed per repeat")
    ap.add_argument("--conns", type=int, default=50, help="kept-alive loopback connections")
    ap.add_argument("--rounds", type=int, default=20, help="requests per connection per repeat")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--against", metavar="COMMIT",
                    help="also measure the two wires of an older commit (before the merge: "
                         "cb5934f), in the same run")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        asyncio.run(_serve())
        return
    impls = implementations(args.against)
    parsed: dict[str, dict[str, list[float]]] = {}
    trips: dict[str, dict[str, list[float]]] = {}
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{json.loads(server.stdout.readline())['port']}"
        for _ in range(args.repeat):
            for shape, pieces in shapes().items():
                sink = shape == "canary sse"
                for impl in impls:
                    us = asyncio.run(parse_cpu(impl, pieces, sink, args.answers))
                    parsed.setdefault(shape, {}).setdefault(impl.name, []).append(us)
                    us = asyncio.run(round_trip_cpu(impl, url, PATHS[shape], sink, args.conns,
                                                    args.rounds))
                    trips.setdefault(shape, {}).setdefault(impl.name, []).append(us)
    finally:
        server.kill()
        server.wait()
    _table(f"parse, CPU per answer ({args.answers} answers a repeat, {args.repeat} repeats):",
           parsed)
    _table(f"round trip, CPU per request ({args.conns} kept-alive connections x "
           f"{args.rounds} rounds, {args.repeat} repeats):", trips)


if __name__ == "__main__":
    main()
