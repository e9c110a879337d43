"""sentinel_thread_cpu_seconds_total: which of Sentinel's threads the CPU goes to."""

from __future__ import annotations

import os
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sentinel.daemon.threadcpu import ThreadCPUCollector, thread_cpu_seconds, thread_group

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")


def test_pool_workers_and_numbered_threads_count_under_one_name() -> None:
    assert thread_group("sentinel-jobs_3") == "sentinel-jobs"
    assert thread_group("ThreadPoolExecutor-3_12") == "ThreadPoolExecutor"
    assert thread_group("sentinel-io") == "sentinel-io"
    # Threads started again and again keep one series.
    assert thread_group("Thread-12 (_read)") == thread_group("Thread-13 (_read)") == \
        "Thread (_read)"
    assert thread_group("Thread-7") == "Thread"


def _burn(seconds: float, burnt: threading.Event, done: threading.Event) -> None:
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        sum(range(1000))
    burnt.set()
    done.wait()


def test_a_busy_thread_shows_its_cpu_and_an_idle_one_none() -> None:
    done = threading.Event()
    burnt = [threading.Event() for _ in range(2)]
    busy = [threading.Thread(target=_burn, args=(0.4, b, done), name=f"burner_{i}")
            for i, b in enumerate(burnt)]
    idle = threading.Thread(target=done.wait, name="sleeper")
    for t in (*busy, idle):
        t.start()
    try:
        assert all(b.wait(60) for b in burnt), "the burners never finished"
        seconds = thread_cpu_seconds()
        # Two workers of one "pool", summed under its name (0.8 s; the kernel counts ticks).
        assert seconds["burner"] >= 0.6
        assert seconds["sleeper"] < 0.05
        text = generate_latest(_registry()).decode()
        assert 'sentinel_thread_cpu_seconds_total{thread="burner"}' in text
        assert 'thread="burner_0"' not in text
    finally:
        done.set()
        for t in (*busy, idle):
            t.join(5)


def _registry() -> CollectorRegistry:
    r = CollectorRegistry()
    r.register(ThreadCPUCollector())
    return r
