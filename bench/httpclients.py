"""Which HTTP client for scrapes: CPU per request of each, over kept-alive loopback connections.

Run: `python bench/httpclients.py [--targets 200] [--rounds 20]`.

bench/fleet.py's helper serves the 42 KB vLLM page (gzip) on N ports. For
each client, one connection (or client/session) per target is kept alive,
and every round GETs all N pages concurrently on one asyncio loop, bodies
decompressed and read whole. Measured: this process's CPU time per request
(the helper serving the pages runs in its own process). Clients:

  * sentinel.collect.http1 (parsed in the asyncio protocol, what scrapes and probes use);
  * httpx.AsyncClient, one per target (max 1 connection, 60 s keep-alive);
  * aiohttp.ClientSession, one per target (if installed).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

FLEET = Path(__file__).resolve().parent / "fleet.py"
HEADERS = {"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "gzip"}


async def run_http1(urls: list[str], rounds: int) -> tuple[float, int]:
    """CPU seconds and requests for sentinel.collect.http1."""
    from sentinel.collect.http1 import Connection, build_request

    conns = [Connection(u) for u in urls]
    reqs = [build_request(u, "/metrics", HEADERS) for u in urls]

    async def one(i: int) -> int:
        return len((await conns[i].get(reqs[i], 10 << 20)).body)

    try:
        return await _rounds(urls, rounds, one)
    finally:
        for c in conns:
            c.close()


async def run_httpx(urls: list[str], rounds: int) -> tuple[float, int]:
    """CPU seconds and requests for httpx.AsyncClient, one client per target."""
    import httpx

    limits = httpx.Limits(max_connections=1, keepalive_expiry=60)
    clients = [httpx.AsyncClient(limits=limits, headers=HEADERS) for _ in urls]

    async def one(i: int) -> int:
        return len((await clients[i].get(urls[i] + "/metrics")).content)

    try:
        return await _rounds(urls, rounds, one)
    finally:
        for c in clients:
            await c.aclose()


async def run_aiohttp(urls: list[str], rounds: int) -> tuple[float, int]:
    """CPU seconds and requests for aiohttp.ClientSession, one session per target."""
    import aiohttp

    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(
        limit=1, keepalive_timeout=60), headers=HEADERS) for _ in urls]

    async def one(i: int) -> int:
        async with sessions[i].get(urls[i] + "/metrics") as r:
            return len(await r.read())

    try:
        return await _rounds(urls, rounds, one)
    finally:
        for s in sessions:
            await s.close()


async def _rounds(urls: list[str], rounds: int,
                  one: Callable[[int], Awaitable[int]]) -> tuple[float, int]:
    await asyncio.gather(*(one(i) for i in range(len(urls))))  # connect, warm up
    gc.collect()
    start = time.process_time()
    for _ in range(rounds):
        sizes = await asyncio.gather(*(one(i) for i in range(len(urls))))
        assert min(sizes) > 40_000, "short body"
    return time.process_time() - start, rounds * len(urls)


def main() -> None:
    """Start the page server, measure each client (best of --repeat), print CPU per request."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    server = subprocess.Popen([sys.executable, str(FLEET), "--serve", str(args.targets)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        ports = json.loads(server.stdout.readline())["ports"]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        runs: list[tuple[str, Callable[..., Awaitable[tuple[float, int]]]]] = [
            ("sentinel.collect.http1", run_http1), ("httpx.AsyncClient", run_httpx)]
        try:
            import aiohttp  # noqa: F401
            runs.append(("aiohttp.ClientSession", run_aiohttp))
        except ImportError:
            print("aiohttp not installed: skipped")
        results = {}
        for _ in range(args.repeat):  # interleaved, so machine noise hits each alike
            for name, fn in runs:
                cpu, n = asyncio.run(fn(urls, args.rounds))
                results[name] = min(results.get(name, float("inf")), 1000 * cpu / n)
    finally:
        server.kill()
        server.wait()
    base = results["sentinel.collect.http1"]
    print(f"{args.targets} kept-alive targets x {args.rounds} rounds, best of {args.repeat}:")
    for name, ms in results.items():
        print(f"  {name:<24} {ms:6.3f} ms CPU per request  {ms / base:5.2f}x http1")


if __name__ == "__main__":
    main()
