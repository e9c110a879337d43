"""The one asyncio event loop that does Sentinel's network I/O, on a thread of its own.

Every network source (scrapes today; probes and other async clients later)
runs its I/O as coroutines on this loop, so a fleet of 1,000 targets costs
one thread and one selector instead of a thread pool fighting for the GIL.
Other threads hand work in with `submit(coro)` (a `concurrent.futures.Future`
back) or `run(coro, timeout)` (wait for the result); code already on the
loop simply awaits.

`stop(timeout)` cancels whatever is still running, lets the cancelled
coroutines clean up (close their connections), and closes the loop: no task
is left to be destroyed while pending, so shutdown logs no tracebacks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class IOLoop:
    """An asyncio event loop running on a daemon thread; the place other sources submit to."""

    def __init__(self, name: str = "sentinel-io") -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> IOLoop:
        """Start the loop's thread (idempotent); returns self."""
        with self._lock:
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
        self._started.wait()
        return self

    @property
    def running(self) -> bool:
        """Whether coroutines submitted now will run."""
        return self._thread is not None and not self._stopped

    def in_loop(self) -> bool:
        """Whether the caller is running on the loop's thread."""
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule a coroutine on the loop from any thread; its result comes back as a Future."""
        if not self.running:
            self.start()
        if self._stopped:
            coro.close()
            raise RuntimeError("the I/O loop is stopped")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the loop and wait for its result (never call from the loop)."""
        if self.in_loop():
            coro.close()
            raise RuntimeError("IOLoop.run called on the loop's own thread: await instead")
        return self.submit(coro).result(timeout)

    def call_soon(self, fn: Any, *args: Any) -> None:
        """Call a plain function on the loop's thread."""
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self, timeout: float = 5.0) -> bool:
        """Cancel every task, let them finish cleaning up, stop and close the loop.

        Returns False when the loop did not stop within `timeout` seconds
        (its thread is a daemon: the process can still exit).
        """
        with self._lock:
            if self._stopped:
                return True
            self._stopped = True
            thread = self._thread
        if thread is None:
            self.loop.close()
            return True
        self.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._shutdown(timeout)))
        thread.join(timeout + 0.5)
        if thread.is_alive():
            log.warning("I/O loop did not stop within %.1fs", timeout)
            return False
        return True

    async def _shutdown(self, timeout: float) -> None:
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        for t in tasks:
            t.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=max(0.1, timeout - 0.5))
            if pending:
                log.warning("%d I/O tasks ignored cancellation", len(pending))
        self.loop.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            except Exception:  # noqa: BLE001 (closing anyway)
                log.debug("shutting down async generators failed", exc_info=True)
            self.loop.close()
