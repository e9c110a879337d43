"""CPU time by thread: `sentinel_thread_cpu_seconds_total{thread}`, read from /proc at scrape time.

`process_cpu_seconds_total` says how much Sentinel costs, not which part:
the I/O loop (scrapes, probes), the rule groups and blocking sources (the
scheduler's pool), the notifier, the HTTP surfaces. Each Python thread's
kernel counters (/proc/self/task/<native id>/stat, user + system) are summed
by thread name, with the numbers Python and a pool add dropped
(`sentinel-jobs_3` -> `sentinel-jobs`, `Thread-12 (_read)` -> `Thread (_read)`,
`ThreadPoolExecutor-3_0` -> `ThreadPoolExecutor`): threads started again and
again (a log command's readers) keep one series, so the label set stays
small and a rate of it says where the CPU goes (the probe-cost experiments read
it to split what probes add).

Pool workers live as long as their pool, so a series only falls when its
threads end (a reload's worker, a stopped source); `rate()` treats that as
a counter reset. Outside Linux (no /proc/self/task) it reports nothing.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

_TASKS = "/proc/self/task"
# concurrent.futures names its workers <prefix>_<n>; threading, unnamed threads
# Thread-<n> (<target>); concurrent.futures, unnamed pools ThreadPoolExecutor-<n>.
_WORKER = re.compile(r"_\d+$")
_COUNTER = re.compile(r"-\d+(?=$| \()")
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def thread_group(name: str) -> str:
    """The label a thread is counted under: its name without a pool worker's number."""
    return _COUNTER.sub("", _WORKER.sub("", name), count=1)


def thread_cpu_seconds(tasks: str = _TASKS) -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process's live threads, by group."""
    out: dict[str, float] = {}
    for t in threading.enumerate():
        if t.native_id is None:
            continue
        try:
            with open(f"{tasks}/{t.native_id}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # the thread ended after enumerate(), or no /proc
            continue
        # Fields after the ")" closing the command name: utime and stime are the 12th and 13th.
        fields = stat.rsplit(b")", 1)[-1].split()
        group = thread_group(t.name)
        out[group] = out.get(group, 0.0) + (int(fields[11]) + int(fields[12])) * _TICK_S
    return out


class ThreadCPUCollector(Collector):
    """Serves `sentinel_thread_cpu_seconds_total{thread}` from /proc at each collection."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "sentinel_thread_cpu_seconds",
            "CPU seconds (user + system) used by Sentinel's threads, by thread name (pool "
            "workers summed under their pool's name).", labels=["thread"])
        if os.path.isdir(_TASKS):
            for group, seconds in sorted(thread_cpu_seconds().items()):
                family.add_metric([group], seconds)
        yield family

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily("sentinel_thread_cpu_seconds", "", labels=["thread"])
