"""Fleet benchmark: N loopback vLLM targets scraped by Sentinel, then by Prometheus, same run.

Run: `python bench/fleet.py --targets 1000 --seconds 60` (unattended); `--workers 2`
sets Sentinel's `collect_workers`, `--pairs N` interleaves N Sentinel/Prometheus pairs,
`--pending` keeps an alert pending on every target (VLLMRequestsQueued's `for` raised to
1 h in a copy of the shipped rules both load); each block says the load average.
CPU and RSS are the measured process's plus its children's (the collect workers).

One helper process serves a real vLLM /metrics page (tests/data/vllm_metrics.txt,
42 KB) on N loopback ports, its counters growing at every scrape of a target as a
healthy server's do (`--traffic steady`; `mixed`, the default until 2026-11, cycles
8 variants, so every counter drops several times a window): keep-alive,
gzip when asked, and it counts the requests each port answers, so "scrapes
done" is measured the same way for both systems. Then, one after the other,
with the same targets, scrape interval (5 s), evaluation interval (5 s) and
rule files (rules/vllm.yaml, rules/sentinel.yaml):

  * `sentinel run` (this checkout, `python -m sentinel`);
  * Prometheus (`prometheus` on PATH, e.g. Debian's /usr/bin/prometheus), if installed.

For each it prints: start-up (seconds and CPU seconds until every target
was scraped once), CPU seconds per second and per scrape over the window,
scrapes done vs expected, rule group evaluations done vs expected (and the
missed counters), RSS readings through the window, and how SIGTERM went
(seconds to exit, tracebacks in the log). With `--py-spy SECONDS`, a py-spy
profile of Sentinel after the window, summarised as its top functions.

With `--pin`, the measured system runs on the first CPU and the fleet helper
on the others, so neither steals the other's core: `--probes both --pin
--repeat N` asks what probes add to a Sentinel alone on its core, as in
production. Runs a minute apart still drift on a shared machine (issue 12:
six pinned pairs read −0.7 % to +38.5 %): compare figures from one
session, and repeat them.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import ctypes
import functools
import gzip
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "tests" / "data" / "vllm_metrics.txt"
RULE_FILES = [ROOT / "rules" / "vllm.yaml", ROOT / "rules" / "sentinel.yaml"]
VARIANTS = 8
STEADY_VARIANTS = 128
CLK_TCK = os.sysconf("SC_CLK_TCK")
_SAMPLE = re.compile(r"^([^#\s][^ ]*(?:\{[^}]*\})?) ([0-9.e+-]+)$", re.M)


# -- the targets ----------------------------------------------------------------------

# Counters a healthy server's traffic does not move: with them growing at every scrape,
# VLLMRequestErrorsHigh would go pending on every target of a steady fleet.
_FAILURES = re.compile(r'finished_reason="(?:abort|error)"|^vllm:num_preemptions')


def page_variants(n: int = VARIANTS, firing: bool = False,
                  healthy: bool = False) -> list[tuple[bytes, bytes]]:
    """(plain, gzip) bodies of the page; in variant k the counters have grown by k
    (with `healthy`, all but the failure counters).

    A healthy fleet by default: no request waits, so no shipped alert fires.
    With `firing`, the page's 3 waiting requests stay and the shipped
    VLLMRequestsQueued alert fires for every target (an alert storm: one
    incident per target, which loads the incident stage, not collection).
    """
    text = PAGE.read_text()
    if not firing:
        text = re.sub(r"^(vllm:num_requests_waiting\{[^}]*\}) \S+$", r"\1 0.0", text, flags=re.M)
    out = []
    for k in range(n):
        def bump(m: re.Match[str], k: int = k) -> str:
            head = m.group(1).split("{", 1)[0]
            if not head.endswith(("_total", "_count", "_sum", "_bucket")) or (
                    healthy and _FAILURES.search(m.group(1))):
                return m.group(0)
            return f"{m.group(1)} {float(m.group(2)) + k:g}"
        body = _SAMPLE.sub(bump, text).encode()
        out.append((body, gzip.compress(body, 6)))
    return out


class _Target(asyncio.Protocol):
    def __init__(self, fleet: _Fleet, port_index: int) -> None:
        self.fleet = fleet
        self.i = port_index
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment] (uvloop's is no asyncio.Transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            head, _, rest = self.buf.partition(b"\r\n\r\n")
            head = head.lower()
            need = _content_length(head)  # a probe's POST carries a body
            if len(rest) < need:
                return
            body, self.buf = rest[:need], rest[need:]
            if head.startswith(b"get /metrics"):
                self.fleet.answer(self, head)
            else:
                self.fleet.probes.answer(self, head, body)


class _Fleet:
    def __init__(self, pages: list[tuple[bytes, bytes]], traffic: str = "steady",
                 ttft_s: float | None = None, firing: bool = False) -> None:
        self.pages = pages
        self.counts: list[int] = []
        self.n = 0
        self.probes = _ProbeAnswers(_TTFT_S if ttft_s is None else ttft_s)
        self.traffic = _Traffic(traffic, pages, firing)
        self.mode, self.firing = traffic, firing
        self.other: _Traffic | None = None  # the pages of the other state, made on demand

    def flip(self, firing: bool) -> None:
        """Every target serves the firing pages (or the calm ones) from the next scrape on:
        the whole fleet changes at one instant (bench/storm.py)."""
        if firing == self.firing:
            return
        if self.other is None:
            self.other = _Traffic(self.mode, page_variants(firing=firing), firing)
            self.other.served = self.traffic.served  # counters go on growing, no reset
        self.traffic, self.other, self.firing = self.other, self.traffic, firing

    def answer(self, t: _Target, head: bytes) -> None:
        self.counts[t.i] += 1
        self.n += 1
        plain, zipped = self.traffic.page(self.n, t.i, self.counts[t.i])
        gz = b"gzip" in head and b"accept-encoding" in head
        body = zipped if gz else plain
        extra = b"Content-Encoding: gzip\r\n" if gz else b""
        assert t.transport is not None
        t.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                          + extra + b"Content-Length: " + str(len(body)).encode()
                          + b"\r\n\r\n" + body)
        if b"connection: close" in head:
            t.transport.close()


# -- the targets' serving endpoints, for the probes (--probes) ------------------------------

def _content_length(head: bytes) -> int:
    at = head.find(b"content-length:")
    if at < 0:
        return 0
    end = head.find(b"\r\n", at)
    return int(head[at + 15:end if end >= 0 else len(head)])


_MODELS = json.dumps({"object": "list", "data": [
    {"id": "gemma-4", "object": "model", "max_model_len": 16384}]}).encode()
# The canary's answer as vLLM streams it (serving_chat's stream generator): the role
# chunk and the first token together, one event per further token, the last token's
# chunk carrying finish_reason, then usage and [DONE] at once; as many tokens as the
# request's max_tokens (the canary always gets them all: "ok ok ok..."). 20 ms to the
# first token, then 5 ms per token (~200 tok/s, seeds/001's single stream).
_TTFT_S, _ITL_S = 0.020, 0.005
_MAX_TOKENS = re.compile(rb'"max_tokens":\s*(\d+)')


def _sse(obj: object) -> bytes:
    data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _chunk(delta: dict[str, str], finish: str | None = None) -> dict[str, object]:
    return {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "gemma-4",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _stream(tokens: int) -> list[bytes]:
    """The writes of a streamed answer of `tokens` tokens, one per token."""
    out = []
    for i in range(tokens):
        last = i == tokens - 1
        event = _sse(_chunk({"content": "ok" if i == 0 else " ok"}, "length" if last else None))
        if i == 0:
            event = _sse(_chunk({"role": "assistant", "content": ""})) + event
        if last:
            event += _sse({"id": "cmpl-1", "object": "chat.completion.chunk", "created": 0,
                           "model": "gemma-4", "choices": [], "usage": {
                               "prompt_tokens": 12, "completion_tokens": tokens,
                               "total_tokens": 12 + tokens}}) + _sse(b"[DONE]") + b"0\r\n\r\n"
        out.append(event)
    return out


_STREAMS = {n: _stream(n) for n in range(1, 17)}


class _ProbeAnswers:
    """/health, /v1/models and a streamed /v1/(chat/)completions, counted by kind."""

    def __init__(self, ttft_s: float = 0.020) -> None:
        self.counts: Counter[str] = Counter()
        self.ttft_s = ttft_s

    def answer(self, t: _Target, head: bytes, body: bytes = b"") -> None:
        assert t.transport is not None
        path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
        if path.endswith(b"/health"):
            self.counts["health"] += 1
            t.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        elif path.endswith(b"/v1/models"):
            self.counts["models"] += 1
            t.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n%s" % (len(_MODELS), _MODELS))
        elif path.endswith(b"/completions"):
            self.counts["canary"] += 1
            t.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                              b"Transfer-Encoding: chunked\r\n\r\n")
            loop = asyncio.get_running_loop()
            asked = _MAX_TOKENS.search(body)
            tokens = min(16, max(1, int(asked.group(1)))) if asked else 16
            for i, event in enumerate(_STREAMS[tokens]):
                loop.call_later(self.ttft_s + i * _ITL_S, _write, t, event)
        else:
            self.counts["other"] += 1
            t.transport.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")


def _write(t: _Target, data: bytes) -> None:
    if t.transport is not None and not t.transport.is_closing():
        t.transport.write(data)


class _Traffic:
    """Which page a scrape gets, by `--traffic`.

    - steady (the default): a target's counters only grow, as a real
      server's do: its k-th scrape ever gets variant k (counters up by k), up
      to the last of STEADY_VARIANTS (then they hold; 640 s at 5 s);
    - mixed (the default until 2026-11): variant `n % 8` by the fleet's
      request count, so a target's counters drop several times a window,
      which no real server does (every rate then walks its counter resets);
    - busy: the same, but `vllm:generation_tokens_total` grows at every
      scrape of the target (a gzip member of its own per answer), so the
      heartbeat sees tokens flowing and the canaries are skipped;
    - idle: one page where nothing moves and nothing runs or waits, so every
      probe sends its canary.
    """

    GEN = re.compile(rb"^vllm:generation_tokens_total\{[^}]*\} \S+\n", re.M)

    def __init__(self, mode: str, pages: list[tuple[bytes, bytes]],
                 firing: bool = False) -> None:
        self.mode = mode
        self.pages = pages
        self.served: dict[int, int] = {}  # scrapes of each target, never reset
        if mode == "steady":
            self.pages = page_variants(STEADY_VARIANTS, firing, healthy=True)
        if mode == "idle":
            text = re.sub(rb"^(vllm:num_requests_(?:running|waiting)\{[^}]*\}) \S+$",
                          rb"\1 0.0", pages[0][0], flags=re.M)
            self.idle = (text, gzip.compress(text, 6))
        elif mode == "busy":
            self.split = []
            for plain, _ in pages:
                m = self.GEN.search(plain)
                assert m is not None, "the page has no vllm:generation_tokens_total"
                head, tail = plain[:m.start()], plain[m.end():]
                name = m.group(0).rsplit(b" ", 1)[0]
                self.split.append((head, gzip.compress(head, 6), name, tail,
                                   gzip.compress(tail, 6)))

    def page(self, n: int, port: int, scrapes: int) -> tuple[bytes, bytes]:
        """(plain, gzip) body for the request `n` of the fleet, the `scrapes`-th of `port`."""
        if self.mode == "idle":
            return self.idle
        if self.mode == "steady":
            k = self.served[port] = self.served.get(port, -1) + 1
            return self.pages[min(k, len(self.pages) - 1)]
        if self.mode == "busy":
            head, zhead, name, tail, ztail = self.split[n % len(self.split)]
            line = b"%s %d\n" % (name, 1_000_000 + 50 * scrapes)  # ~10 tokens/s
            # Concatenated gzip members are one valid gzip stream (RFC 1952 2.2).
            return head + line + tail, zhead + gzip.compress(line, 1) + ztail
        return self.pages[n % len(self.pages)]


async def _serve(n: int, firing: bool, traffic: str = "steady",
                 ttft_s: float | None = None) -> None:
    fleet = _Fleet(page_variants(firing=firing), traffic, ttft_s, firing)
    loop = asyncio.get_running_loop()
    ports = []
    for i in range(n):
        fleet.counts.append(0)
        server = await loop.create_server(lambda i=i: _Target(fleet, i), "127.0.0.1", 0,
                                          backlog=256)
        ports.append(server.sockets[0].getsockname()[1])

    async def control(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        command = (await reader.readline()).strip()
        if command == b"reset":
            fleet.counts = [0] * len(fleet.counts)
            fleet.probes.counts.clear()
        elif command in (b"fire", b"calm"):
            fleet.flip(command == b"fire")
        hit = sum(1 for c in fleet.counts if c)
        writer.write(json.dumps({"total": fleet.n, "hit": hit,
                                 "probes": dict(fleet.probes.counts)}).encode() + b"\n")
        await writer.drain()
        writer.close()

    ctl = await asyncio.start_server(control, "127.0.0.1", 0)
    print(json.dumps({"control": ctl.sockets[0].getsockname()[1], "ports": ports}), flush=True)
    await asyncio.Event().wait()


def serve_main(n: int, firing: bool = False, traffic: str = "steady",
               ttft_s: float | None = None) -> None:
    """The helper process: serve until killed."""
    _raise_fd_limit()
    try:
        import uvloop  # type: ignore[import-not-found]
        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_serve(n, firing, traffic, ttft_s))


class FleetProcess:
    """The helper processes serving the targets (one per `per_helper` targets, so each
    stays under the file-descriptor limit), and their request counters."""

    def __init__(self, n: int, firing: bool = False, traffic: str = "steady",
                 ttft_s: float | None = None, cpus: set[int] | None = None,
                 per_helper: int = 5000) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        self.controls: list[int] = []
        self.ports: list[int] = []
        for first in range(0, n, per_helper):
            cmd = [sys.executable, __file__, "--serve", str(min(per_helper, n - first)),
                   "--traffic", traffic] + (["--firing"] if firing else []) + (
                ["--canary-ttft", str(ttft_s)] if ttft_s is not None else [])
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                    preexec_fn=functools.partial(_prepare, cpus))
            self.procs.append(proc)
            assert proc.stdout is not None
            info = json.loads(proc.stdout.readline())
            self.controls.append(info["control"])
            self.ports += info["ports"]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def counts(self, reset: bool = False) -> dict:
        """{"total": scrapes answered, "hit": ports scraped at least once (since a reset),
        "probes": {kind: probe requests answered (since a reset)}}, over every helper."""
        out: dict = {"total": 0, "hit": 0, "probes": Counter()}
        for control in self.controls:
            with socket.create_connection(("127.0.0.1", control), timeout=10) as s:
                s.sendall(b"reset\n" if reset else b"count\n")
                one = json.loads(s.makefile().readline())
            out["total"] += one["total"]
            out["hit"] += one["hit"]
            out["probes"].update(one["probes"])
        out["probes"] = dict(out["probes"])
        return out

    def flip(self, firing: bool) -> None:
        """Every helper's targets serve the firing (or calm) pages from their next scrape."""
        for control in self.controls:
            with socket.create_connection(("127.0.0.1", control), timeout=10) as s:
                s.sendall(b"fire\n" if firing else b"calm\n")
                s.makefile().readline()

    def stop(self) -> None:
        """Kill the helpers (by their pids)."""
        for proc in self.procs:
            proc.kill()
            proc.wait(10)


# -- measuring a process --------------------------------------------------------------

def tree(pid: int) -> list[int]:
    """A process and its descendants (Sentinel's collect workers), read from /proc."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def cpu_s(pid: int, children: bool = True) -> float:
    """User + system CPU seconds so far of a process and its live descendants."""
    total = 0.0
    for p in tree(pid) if children else [pid]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def rss_mb(pid: int) -> float:
    """Resident set size in MB of a process and its descendants (summed: shared pages
    count once per process, so a pool of workers is over-counted, not flattered)."""
    total = 0.0
    for p in tree(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:
            continue
        total += sum(int(ln.split()[1]) / 1024 for ln in lines if ln.startswith("VmRSS:"))
    return total


def metrics(port: int) -> dict[str, float]:
    """A /metrics page as {series text: value} (comments skipped)."""
    # A starved daemon at 5,000 targets serves its large page slowly: wait for it.
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            try:
                out[head] = float(value)
            except ValueError:
                pass
    return out


def active_alerts(port: int) -> dict[str, int]:
    """Active alerts by state, as /api/v1/alerts lists them (Sentinel and Prometheus)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=120) as r:
            doc = json.loads(r.read())
    except (OSError, ValueError):
        return {}
    return dict(Counter(a.get("state", "?") for a in doc.get("data", {}).get("alerts", [])))


def pending_rules(folder: Path) -> list[Path]:
    """The shipped rules with VLLMRequestsQueued's `for` raised to an hour: with the firing
    pages, an alert pending on every target through the whole window, never firing."""
    text = RULE_FILES[0].read_text()
    head, sep, tail = text.partition("- alert: VLLMRequestsQueued")
    if not sep or "for: 30s" not in tail.split("- alert:", 1)[0]:
        raise SystemExit(f"VLLMRequestsQueued with `for: 30s` not found in {RULE_FILES[0]}")
    path = folder / RULE_FILES[0].name
    path.write_text(head + sep + tail.replace("for: 30s", "for: 1h", 1))
    return [path, *RULE_FILES[1:]]


def total(m: dict[str, float], name: str) -> float:
    """Sum of every series of a metric name."""
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


_GROUP = re.compile(r'(?:group|rule_group)="([^"]*)"')
_LE = re.compile(r'le="([^"]*)"')


def group_stats(system: str, m0: dict[str, float], m1: dict[str, float]
                ) -> dict[str, dict[str, float]]:
    """Per rule group, between two /metrics readings: evaluations done, missed (could not
    start on time), overran (took longer than the interval: the next one could not start),
    the mean duration and the largest duration bucket reached (Sentinel's histogram;
    Prometheus: its last duration)."""
    names = NAMES[system]
    out: dict[str, dict[str, float]] = {}

    def each(prefix: str) -> dict[str, float]:
        found: dict[str, float] = {}
        for k in m1:
            if k.startswith(prefix + "{"):
                g = _GROUP.search(k)
                if g:
                    name = g.group(1).rsplit(";", 1)[-1]  # Prometheus: file;group
                    found[name] = found.get(name, 0.0) + m1[k] - m0.get(k, 0.0)
        return found

    done, missed = each(names[0]), each(names[1])
    for g in done:
        out[g] = {"done": done[g], "missed": missed.get(g, 0.0)}
    if system == "sentinel":
        for name, key in (("sentinel_rule_group_overruns_total", "overran"),
                          ("sentinel_rule_group_duration_seconds_sum", "sum_s"),
                          ("sentinel_rule_group_duration_seconds_count", "count")):
            for g, v in each(name).items():
                out.setdefault(g, {})[key] = v
        for k, v in m1.items():  # the largest bucket an evaluation of the window reached
            if k.startswith("sentinel_rule_group_duration_seconds_bucket{"):
                g, le = _GROUP.search(k), _LE.search(k)
                if not g or not le or le.group(1) == "+Inf":
                    continue
                stats = out.setdefault(g.group(1), {})
                below = v - m0.get(k, 0.0)  # evaluations at or under this bound
                if below < stats.get("count", 0.0):
                    stats["max_over_s"] = max(stats.get("max_over_s", 0.0), float(le.group(1)))
    else:
        for g, v in each("prometheus_rule_group_last_duration_seconds").items():
            out.setdefault(g, {})["last_s"] = v + 0.0
        for k, v in m1.items():
            if k.startswith("prometheus_rule_group_last_duration_seconds{"):
                g = _GROUP.search(k)
                if g:
                    out.setdefault(g.group(1).rsplit(";", 1)[-1], {})["last_s"] = v
    return out


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Result:
    """What one system did in one run."""

    system: str
    targets: int
    startup_s: float = 0.0
    startup_cpu_s: float = 0.0
    window_s: float = 0.0
    cpu_per_s: float = 0.0
    main_cpu_per_s: float = 0.0  # the daemon's own process, without its collect workers
    cpu_ms_per_scrape: float = 0.0
    scrapes_done: int = 0
    scrapes_expected: int = 0
    groups: int = 0
    evals_done: float = 0.0
    evals_expected: float = 0.0
    evals_missed: float = 0.0
    scrapes_missed: float = 0.0
    scrapes_reported: float = 0.0  # by the system itself (attempts)
    scrapes_failed: float = 0.0
    rss_mb: list[float] = field(default_factory=list)
    stop_s: float = 0.0
    tracebacks: int = 0
    first_traceback: str = ""
    profile: list[tuple[str, float]] = field(default_factory=list)
    # Per rule group, over the window (group_stats): evaluations done, missed, overran,
    # mean and largest duration (the histogram's bucket), as the system reports them.
    groups_detail: dict[str, dict[str, float]] = field(default_factory=dict)
    probe_requests: dict[str, int] = field(default_factory=dict)  # in the window, by kind
    # The machine's load average (1, 5, 15 min) at the window's end: a shared machine's
    # figures mean little without it.
    load: tuple[float, ...] = ()
    # Active alerts at the window's end by state, from /api/v1/alerts (both serve it).
    alerts: dict[str, int] = field(default_factory=dict)


# -- the two systems ------------------------------------------------------------------

def sentinel_cmd(work: Path, ports: list[int], listen: int, probes: bool = False,
                 canary_cap: int = 0, workers: str = "") -> list[str]:
    """Write a Sentinel config for the fleet; the command that runs it.

    `probes`: probes at their default interval (15 s) and canary cap; else off."""
    lines = [f"database: sqlite:///{work / 'sentinel.db'}", f"listen: 127.0.0.1:{listen}",
             "rule_files: [" + ", ".join(str(p) for p in RULE_FILES if p.exists()) + "]",
             "evaluation_interval: 5s", "scrape_interval: 5s", "scrape_timeout: 4s",
             # Collection against collection: Prometheus does not probe. With --probes,
             # the default (15 s) against the helper's /health, /v1/models, completions.
             *([] if probes else ["probe_interval: 0s"]),
             *([f"probe_canary_concurrency: {canary_cap}"] if canary_cap else []),
             *([f"collect_workers: {workers}"] if workers else []),
             "targets:"]
    lines += [f"  - {{name: t{i}, url: 'http://127.0.0.1:{p}'}}" for i, p in enumerate(ports)]
    (work / "sentinel.yaml").write_text("\n".join(lines) + "\n")
    return [sys.executable, "-m", "sentinel", "run", "-c", str(work / "sentinel.yaml")]


def prometheus_cmd(work: Path, ports: list[int], listen: int) -> list[str]:
    """Write a Prometheus config for the fleet; the command that runs it.

    Each target carries the `target` label Sentinel gives it (`t<i>`): the shipped
    rules aggregate `by (target)`, and without it Prometheus evaluated one series where
    Sentinel evaluated one per target (one pending alert for the fleet, not 5,000)."""
    targets = "\n".join(f"      - {{targets: ['127.0.0.1:{p}'], labels: {{target: t{i}}}}}"
                        for i, p in enumerate(ports))
    rules = ", ".join(f"'{p}'" for p in RULE_FILES if p.exists())
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 5s, scrape_timeout: 4s, evaluation_interval: 5s}\n"
        f"rule_files: [{rules}]\n"
        f"scrape_configs:\n  - job_name: vllm\n    static_configs:\n{targets}\n")
    return ["prometheus", f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{listen}",
            "--log.level=warn"]


NAMES = {
    "sentinel": ("sentinel_rule_group_evaluations_total",
                 "sentinel_rule_group_iterations_missed_total", "sentinel_scrapes_missed_total",
                 "sentinel_scrapes_total", 'sentinel_scrapes_total{outcome="failure"'),
    "prometheus": ("prometheus_rule_group_iterations_total",
                   "prometheus_rule_group_iterations_missed_total", "",
                   "prometheus_target_interval_length_seconds_count", ""),
}


def measure(system: str, fleet: FleetProcess, seconds: float, py_spy: float,
            work: Path, probes: bool = False, settle_s: float = 5.0,
            canary_cap: int = 0, cpus: set[int] | None = None, workers: str = "",
            startup_s: float = 120.0) -> Result:
    """Run one system against the fleet and measure it (see the module docstring)."""
    n = len(fleet.ports)
    listen = free_port()
    if system == "sentinel":
        cmd = sentinel_cmd(work, fleet.ports, listen, probes, canary_cap, workers)
    else:
        cmd = prometheus_cmd(work, fleet.ports, listen)
    res = Result(system + ("+probes" if probes else ""), n)
    fleet.counts(reset=True)
    log = open(work / f"{system}.log", "w")  # noqa: SIM115 (closed below)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=functools.partial(_prepare, cpus))
    try:
        hit_all = _wait(lambda: fleet.counts()["hit"] >= n or proc.poll() is not None,
                        startup_s)
        res.startup_s = time.monotonic() - t0
        res.startup_cpu_s = cpu_s(proc.pid)
        if proc.poll() is not None or not hit_all:
            log.flush()
            tail = "".join(Path(log.name).read_text().splitlines(True)[-15:])
            raise RuntimeError(f"{system} exited or never scraped every target "
                               f"({fleet.counts()['hit']} of {n}); its log ends:\n{tail}")
        time.sleep(settle_s)  # every scrape loop is running (probes: past their first two)
        names = NAMES[system]
        m0 = metrics(listen)
        f0 = fleet.counts()
        c0, k0, w0 = f0["total"], cpu_s(proc.pid), time.monotonic()
        m0_cpu = cpu_s(proc.pid, children=False)
        while time.monotonic() - w0 < seconds:
            time.sleep(min(10, seconds - (time.monotonic() - w0)))
            res.rss_mb.append(round(rss_mb(proc.pid), 1))
        # The window ends at the fleet's count: reading Sentinel's /metrics after it must
        # not lengthen the window (it did, by up to 0.3 s: "99.7 % of expected" scrapes).
        f1, k1, w1 = fleet.counts(), cpu_s(proc.pid), time.monotonic()
        res.main_cpu_per_s = (cpu_s(proc.pid, children=False) - m0_cpu) / (w1 - w0)
        res.load = tuple(round(x, 1) for x in os.getloadavg())
        m1, c1 = metrics(listen), f1["total"]
        res.alerts = active_alerts(listen)
        res.probe_requests = {k: v - f0["probes"].get(k, 0) for k, v in f1["probes"].items()}
        res.window_s = w1 - w0
        res.cpu_per_s = (k1 - k0) / res.window_s
        res.scrapes_done = c1 - c0
        res.scrapes_expected = round(n * res.window_s / 5)
        res.cpu_ms_per_scrape = 1000 * (k1 - k0) / max(1, res.scrapes_done)
        res.groups = sum(1 for k in m1 if k.startswith(names[0] + "{"))
        res.evals_done = total(m1, names[0]) - total(m0, names[0])
        res.evals_expected = res.groups * res.window_s / 5
        res.evals_missed = total(m1, names[1]) - total(m0, names[1])
        res.groups_detail = group_stats(system, m0, m1)
        if names[2]:
            res.scrapes_missed = total(m1, names[2]) - total(m0, names[2])
        res.scrapes_reported = total(m1, names[3]) - total(m0, names[3])
        if names[4]:
            res.scrapes_failed = sum(v for k, v in m1.items() if names[4] in k) - sum(
                v for k, v in m0.items() if names[4] in k)
        if py_spy and system == "sentinel":
            res.profile = profile(proc.pid, py_spy, work)
    finally:
        t1 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        res.stop_s = time.monotonic() - t1
        log.close()
    text = (work / f"{system}.log").read_text()
    res.tracebacks = text.count("Traceback")
    if res.tracebacks:
        at = text.index("Traceback")
        res.first_traceback = text[max(0, at - 300):at + 2500]
    return res


def profile(pid: int, seconds: float, work: Path) -> list[tuple[str, float]]:
    """Top functions by own samples, from `py-spy record --format raw`."""
    out = work / "py-spy.txt"
    if not shutil.which("py-spy"):
        return [("py-spy not installed (pip install py-spy)", 0.0)]
    subprocess.run(["py-spy", "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "50",
                    "-f", "raw", "-o", str(out), "--nonblocking"],
                   check=False, capture_output=True)
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for line in out.read_text().splitlines() if out.exists() else []:
        stack, _, count = line.rpartition(" ")
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        own[frames[-1]] += int(count)
        for f in set(frames):
            inclusive[f] += int(count)
    n = sum(own.values()) or 1
    top = [(f"self {f}", round(100 * c / n, 1)) for f, c in own.most_common(12)]
    top += [(f"incl {f}", round(100 * c / n, 1)) for f, c in inclusive.most_common(25)
            if "sentinel" in f or "asyncio" in f][:12]
    return top


def _wait(predicate, timeout_s: float) -> bool:  # noqa: ANN001
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def _prepare(cpus: set[int] | None) -> None:
    """In a child, before it runs: the fleet's descriptor limit, its CPUs when pinned, and
    death with the bench (a bench killed by a signal runs no `finally`: a Prometheus left
    scraping 5,000 ports took 40 % of a core and 8 GB under the next runs)."""
    _raise_fd_limit()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: kill leftovers by hand
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


def pin_plan(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """(the measured system's CPUs, the fleet helper's): with `pin`, the first allowed CPU
    for the system and the rest for the helper, so neither takes the other's core."""
    if not pin:
        return None, None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs two CPUs: one for the system, one for the fleet")
    return {cpus[0]}, set(cpus[1:])


def _raise_fd_limit(want: int = 65536) -> None:
    """The soft limit up to the hard one, and both to `want` where allowed (root): the
    helper of a 5,000-target remote bench holds 5,000 listeners, Prometheus's 5,000
    scrape connections and ~10,000 of the probes', past a hard limit of 20,000."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            return
        except (ValueError, OSError):
            pass
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# -- report ---------------------------------------------------------------------------

def report(results: list[Result]) -> None:
    """Print one block per system, then the ratios Sentinel / Prometheus."""
    for r in results:
        pct = 100 * r.scrapes_done / max(1, r.scrapes_expected)
        per_min = 60 * r.evals_done / max(1, r.groups) / max(1e-9, r.window_s)
        print(f"\n== {r.system}: {r.targets} targets, {r.window_s:.0f} s window, "
              f"load average {' '.join(f'{x:g}' for x in r.load)} at its end")
        if r.alerts:
            print("active alerts at the window's end: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(r.alerts.items())))
        print(f"start-up: {r.startup_s:.1f} s, {r.startup_cpu_s:.1f} CPU s "
              "(until every target scraped once)")
        print(f"CPU: {r.cpu_per_s:.3f} s/s ({r.main_cpu_per_s:.3f} in the main process), "
              f"{r.cpu_ms_per_scrape:.2f} ms per scrape")
        print(f"scrapes: {r.scrapes_done} of {r.scrapes_expected} expected ({pct:.1f} %) "
              f"answered by the targets; {r.scrapes_reported:g} reported by {r.system}"
              + (f" ({r.scrapes_failed:g} failed), missed counter +{r.scrapes_missed:g}"
                 if r.system == "sentinel" else ""))
        print(f"rule group evaluations: {r.evals_done:g} of {r.evals_expected:.0f} expected "
              f"({per_min:.1f} per group per minute of 12), missed counter +{r.evals_missed:g}")
        report_groups(r)
        print(f"RSS MB every 10 s: {r.rss_mb}")
        print(f"SIGTERM: exited in {r.stop_s:.1f} s, {r.tracebacks} tracebacks in the log")
        if r.first_traceback:
            print("first traceback:\n" + r.first_traceback)
        if r.probe_requests:
            print(f"probe requests answered in the window: {r.probe_requests}")
        for name, pct_ in r.profile:
            print(f"  {pct_:5.1f} %  {name}")
    sentinels = [r for r in results if r.system == "sentinel"]
    proms = [r for r in results if r.system == "prometheus"]
    for i, (s, p) in enumerate(zip(sentinels, proms, strict=False)):
        done = [100 * r.scrapes_done / max(1, r.scrapes_expected) for r in (s, p)]
        print(f"\npair {i + 1}, ratios Sentinel / Prometheus: "
              f"CPU per scrape {s.cpu_ms_per_scrape / max(1e-9, p.cpu_ms_per_scrape):.2f}, "
              f"RSS {s.rss_mb[-1] / max(1e-9, p.rss_mb[-1]):.2f}, "
              f"start-up CPU {s.startup_cpu_s / max(1e-9, p.startup_cpu_s):.2f}; "
              f"scrapes done {done[0]:.1f} % vs {done[1]:.1f} %")


def report_groups(r: Result) -> None:
    """Evaluations on time of each rule group, and the slowest group's duration.

    On time: started at its run time (not missed) and done within the interval
    (not overran, so the next one could start). Expected: the window over 5 s.
    """
    if not r.groups_detail:
        return
    expected = r.window_s / 5
    on_time_all = 0.0
    for g, s in sorted(r.groups_detail.items()):
        done, overran = s.get("done", 0.0), s.get("overran", 0.0)
        # Follow-up evaluations (daemon/follow.py, small fleets) add to `done`: not counted.
        on_time = min(max(0.0, done - overran), round(expected))
        on_time_all += on_time
        mean = s["sum_s"] / s["count"] if s.get("count") else s.get("last_s", 0.0)
        over = (f", some over {s['max_over_s']:g} s" if s.get("max_over_s")
                else "")
        print(f"  group {g}: {on_time:g} on time of {expected:.0f} expected "
              f"(done {done:g}, missed +{s.get('missed', 0.0):g}, overran +{overran:g}); "
              f"{'mean' if s.get('count') else 'last'} {mean:.3f} s{over}")
    slowest = max(r.groups_detail.items(), key=lambda kv: (
        kv[1]["sum_s"] / kv[1]["count"] if kv[1].get("count") else kv[1].get("last_s", 0.0)))
    s = slowest[1]
    mean = s["sum_s"] / s["count"] if s.get("count") else s.get("last_s", 0.0)
    print(f"evaluations on time: {on_time_all:g} of {expected * len(r.groups_detail):.0f}; "
          f"slowest group {slowest[0]}: {mean:.3f} s a run"
          + (f" (some over {s['max_over_s']:g} s)" if s.get("max_over_s") else ""))


def report_probes(results: list[Result]) -> None:
    """CPU of Sentinel with probes on against off, pair by pair, and what the probes added."""
    off = [r for r in results if r.system == "sentinel"]
    on = [r for r in results if r.system == "sentinel+probes"]
    if not off or not on:
        return
    print("\nprobes at the default interval (15 s) vs off: Sentinel CPU s/s")
    added = []
    for i, (a, b) in enumerate(zip(off, on, strict=False)):
        share = (b.cpu_per_s - a.cpu_per_s) / max(1e-9, a.cpu_per_s)
        added.append(share)
        canaries = b.probe_requests.get("canary", 0) / max(1e-9, b.window_s)
        # A run that could not do all its work (CPU taken by others) spent less than
        # it needed: its CPU says nothing about the cost, so the pair is marked.
        short = [r.system for r in (a, b) if r.scrapes_done < 0.97 * r.scrapes_expected
                 or r.evals_missed or r.scrapes_missed]
        print(f"  pair {i + 1}: off {a.cpu_per_s:.3f}, on {b.cpu_per_s:.3f}, "
              f"added {100 * share:+.1f} % ({canaries:.1f} canaries/s, "
              f"{b.probe_requests.get('health', 0) / max(1e-9, b.window_s):.1f} health/s)"
              + (f"  SATURATED: {', '.join(short)} missed work" if short else ""))
    added.sort()
    mean_off = sum(r.cpu_per_s for r in off) / len(off)
    mean_on = sum(r.cpu_per_s for r in on) / len(on)
    print(f"  median added {100 * statistics.median(added):+.1f} %; means off {mean_off:.3f}, "
          f"on {mean_on:.3f} s/s: {100 * (mean_on - mean_off) / max(1e-9, mean_off):+.1f} %")


def main() -> None:
    """Parse arguments, start the fleet, measure each system in turn, print the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=60.0, help="measurement window")
    ap.add_argument("--systems", default="sentinel,prometheus")
    ap.add_argument("--py-spy", type=float, default=0.0, metavar="SECONDS",
                    help="profile Sentinel with py-spy for this long after the window")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--firing", action="store_true",
                    help="pages with waiting requests: VLLMRequestsQueued fires for every target")
    ap.add_argument("--pending", action="store_true",
                    help="an alert pending on every target the whole window: the firing "
                         "pages, with VLLMRequestsQueued's `for` raised to 1h in a copy of "
                         "the shipped rules (both systems load it)")
    ap.add_argument("--probes", choices=("off", "on", "both"), default="off",
                    help="Sentinel with probes at the default interval; both: off and on, "
                         "alternating, --repeat pairs (measure with --systems sentinel)")
    ap.add_argument("--repeat", type=int, default=1, help="pairs of runs with --probes both")
    ap.add_argument("--traffic", choices=("steady", "mixed", "busy", "idle"), default="steady",
                    help="the targets' counters: steady (only grow, as a real server's), "
                         "mixed (drop several times a window: the default until 2026-11), "
                         "busy (mixed, but tokens always flow: canaries skipped), "
                         "idle (still: canaries sent)")
    ap.add_argument("--canary-cap", type=int, default=0,
                    help="probe_canary_concurrency (default: Sentinel's)")
    ap.add_argument("--canary-ttft", type=float, default=None, metavar="SECONDS",
                    help=f"the targets' time to first token for a canary (default {_TTFT_S}; "
                         "then 5 ms a token)")
    ap.add_argument("--rule-files", default="",
                    help="comma-separated rule files instead of the shipped ones")
    ap.add_argument("--settle", type=float, default=None,
                    help="seconds between every target scraped once and the window "
                         "(default 5; 35 with --probes: a probe's first two runs, before its "
                         "heartbeat has a counter history, are start-up)")
    ap.add_argument("--pin", action="store_true",
                    help="run the measured system on the first CPU and the fleet helper on "
                         "the others, so they never share a core")
    ap.add_argument("--workers", default="",
                    help="Sentinel's collect_workers (auto or a number; default: its default)")
    ap.add_argument("--pairs", type=int, default=1,
                    help="Sentinel/Prometheus pairs, interleaved (the order alternates)")
    ap.add_argument("--startup-timeout", type=float, default=120.0,
                    help="seconds a system may take to scrape every target once")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve_main(args.serve, args.firing, args.traffic, args.canary_ttft)
        return
    if args.rule_files:
        RULE_FILES[:] = [Path(f).resolve() for f in args.rule_files.split(",")]
    if args.pending:
        args.firing = True
        rules_dir = tempfile.mkdtemp(prefix="fleet-rules-")
        atexit.register(shutil.rmtree, rules_dir, True)
        RULE_FILES[:] = pending_rules(Path(rules_dir))
    if args.settle is None:
        args.settle = 5.0 if args.probes == "off" else 35.0
    _raise_fd_limit()
    systems = [s for s in args.systems.split(",") if s]
    if "prometheus" in systems and not shutil.which("prometheus"):
        print("prometheus not installed: measuring Sentinel only")
        systems.remove("prometheus")
    system_cpus, fleet_cpus = pin_plan(args.pin)
    fleet = FleetProcess(args.targets, args.firing, args.traffic, args.canary_ttft, fleet_cpus)
    runs = []
    for i in range(max(1, args.pairs)):  # alternate the order: drift hits both sides
        order = systems if i % 2 == 0 else systems[::-1]
        runs += [(s, args.probes == "on" and s == "sentinel") for s in order]
    if args.probes == "both" and "sentinel" in systems:
        runs = [r for r in runs if r[0] != "sentinel"]
        for i in range(max(1, args.repeat)):  # alternate the order: drift hits both sides
            pair = [("sentinel", False), ("sentinel", True)]
            runs += pair if i % 2 == 0 else pair[::-1]
    results = []
    try:
        for system, probes in runs:
            with tempfile.TemporaryDirectory(prefix=f"fleet-{system}-") as tmp:
                results.append(measure(system, fleet, args.seconds, args.py_spy, Path(tmp),
                                       probes, args.settle, args.canary_cap, system_cpus,
                                       args.workers, args.startup_timeout))
                time.sleep(2)
    finally:
        fleet.stop()
    report(results)
    report_probes(results)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=1))


if __name__ == "__main__":
    main()
