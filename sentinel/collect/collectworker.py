"""A collect worker: a child process that fetches, parses and filters scrapes for the daemon.

Run as `python -m sentinel.collect.collectworker` by `sentinel.collect.workerpool`;
it speaks `sentinel.collect.workerwire` on its stdin and stdout and logs to
stderr. It does the per-target work that needs no shared state (HTTP with a
kept-alive connection per target, gzip, parsing into the worker's parse
cache, `sample_limit`/`label_limit`, dropping the series no rule reads) and
hands back only the kept samples as packed arrays of (slot, value); a slot's
label set crosses the pipe once. The daemon stores them.

It runs until its stdin closes (the daemon stopped or died). SIGINT and
SIGTERM are ignored: a Ctrl-C or a `systemctl stop` reaches the whole process
group, and the daemon, which is stopping, closes the pipe itself; a worker
that quit first would only look like a crash to restart.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from array import array

from sentinel.collect.deadlines import SentinelLate
from sentinel.collect.exposition import ExpositionError
from sentinel.collect.http1 import HTTPError
from sentinel.collect.scrape import (
    DEFAULT_MAX_BODY_BYTES,
    ScrapeError,
    Scraper,
    ScrapeTarget,
    check_sample_limit,
    describe_error,
    internal_error,
)
from sentinel.collect.scrapeseries import LimitError, TargetSeries
from sentinel.collect.workerwire import Outcome, filter_from, frame, read_message
from sentinel.store.memory import MemoryStore

log = logging.getLogger("sentinel.collect.worker")
# The answer to a scrape read after its deadline (the daemon counts it missed).
EXPIRED = Outcome(False, 0.0, 0, 0, None, None, 0, expired=True)
LATE = Outcome(False, 0.0, 0, 0, None, None, 0, expired=True, late=True)


class Worker:
    """The worker's state: its targets, its scraper (parse cache, connections), the pipe out."""

    def __init__(self, out: asyncio.StreamWriter, max_body_bytes: int) -> None:
        self.out = out
        # The store is never written: it holds the filter the parse cache consults.
        self.filter = MemoryStore()
        self.scraper = Scraper(self.filter, max_body_bytes)
        self.targets: dict[int, ScrapeTarget] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.sent = 0  # slots of the current generation whose labels the daemon has
        self.generation = 0

    def handle(self, message: tuple[object, ...]) -> None:
        """Act on one message from the daemon."""
        kind = message[0]
        if kind == "scrape":
            _, key, seq, now_ms, deadline_ms = message
            if time.time() * 1000 > deadline_ms:  # type: ignore[operator]
                # Read after its deadline (this worker was starved): the daemon has
                # stopped waiting, so scraping now would only deepen the backlog.
                self.out.write(frame(("result", seq, self.generation, EXPIRED)))
                return
            task = asyncio.get_running_loop().create_task(self.scrape(key, seq, now_ms))  # type: ignore[arg-type]
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        elif kind == "target":
            _, key, target = message
            assert isinstance(key, int) and isinstance(target, ScrapeTarget)
            self.targets[key] = target
        elif kind == "forget":
            target = self.targets.pop(message[1], None)  # type: ignore[call-overload]
            if target is not None:
                self.scraper.forget(target.name, 0)
        elif kind == "filter":
            self.filter.set_filter(filter_from(message))
        else:
            log.warning("unknown message %r", kind)

    async def scrape(self, key: int, seq: int, now_ms: int) -> None:
        """Scrape target `key` and send its outcome (never raises)."""
        target = self.targets[key]
        state = self.scraper.target_state(target, now_ms)
        start = time.monotonic()
        try:
            text, openmetrics = await self.scraper.fetch(state)
        except SentinelLate:  # this worker was behind, not the target: the daemon counts it
            outcome = LATE
        except (HTTPError, ScrapeError, UnicodeDecodeError, TimeoutError) as e:
            outcome = _failed(start, describe_error(e, target))
        except Exception as e:  # a bug, not the target: record it, keep the worker alive
            log.exception("scrape of %s failed unexpectedly", target.name)
            outcome = _failed(start, internal_error(e))
        else:
            outcome = self.parse(state, text, openmetrics, start)
        self.send_labels()
        self.out.write(frame(("result", seq, self.generation, outcome)))

    def parse(self, state: TargetSeries, text: str, openmetrics: bool,
              start: float) -> Outcome:
        """Parse a page and keep the samples the rules read."""
        target = self.targets_spec(state)
        try:
            check_sample_limit(text, target.sample_limit)
            page = state.parse(text, openmetrics)
        except LimitError as e:
            return _failed(start, str(e), e.limit)
        except ExpositionError as e:
            return _failed(start, describe_error(e, target))
        except Exception as e:  # a bug, not the target
            log.exception("parsing the page of %s failed unexpectedly", target.name)
            return _failed(start, internal_error(e))
        wanted = state.shared.wanted
        stamps = page.timestamps
        slots = array("I")
        values = array("d")
        stamped = []
        for i, (slot, value) in enumerate(zip(page.slots, page.values, strict=True)):
            if not wanted[slot]:
                continue
            if stamps and i in stamps:
                stamped.append((slot, stamps[i], value))
            else:
                slots.append(slot)
                values.append(value)
        kept = len(slots) + len(stamped)
        return Outcome(True, time.monotonic() - start, len(page.values),
                       len(page.values) - kept, None, None, page.duplicates,
                       slots.tobytes(), values.tobytes(), tuple(stamped))

    @staticmethod
    def targets_spec(state: TargetSeries) -> ScrapeTarget:
        target = state.target
        assert isinstance(target, ScrapeTarget)
        return target

    def send_labels(self) -> None:
        """Tell the daemon the label sets of the slots created since the last message."""
        shared = self.scraper._shared
        if shared.generation != self.generation:
            self.generation, self.sent = shared.generation, 0
        labels = shared.labels
        if len(labels) > self.sent:
            self.out.write(frame(("labels", self.generation, self.sent, labels[self.sent:])))
            self.sent = len(labels)


def _failed(start: float, error: str, limit: str | None = None) -> Outcome:
    return Outcome(False, time.monotonic() - start, 0, 0, error, limit, 0)


async def _pipes() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                 os.fdopen(0, "rb", buffering=0))
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(1, "wb", buffering=0))
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return reader, writer


async def serve(max_body_bytes: int) -> None:
    """Read messages until the pipe closes; then close every connection and return."""
    reader, writer = await _pipes()
    worker = Worker(writer, max_body_bytes)
    writer.write(frame(("ready",)))
    try:
        while True:
            try:
                message = await read_message(reader)
            except asyncio.IncompleteReadError:
                break
            worker.handle(message)
    finally:
        for task in list(worker.tasks):
            task.cancel()
        worker.scraper.close()


def main() -> None:
    """The worker process's entry point."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    level = os.environ.get("SENTINEL_WORKER_LOG_LEVEL", "WARNING")
    logging.basicConfig(stream=sys.stderr, level=level,
                        format=f"%(asctime)s collect-worker[{os.getpid()}] %(levelname)s "
                               "%(name)s: %(message)s")
    asyncio.run(serve(int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MAX_BODY_BYTES))


if __name__ == "__main__":
    main()
