"""Two Sentinels against one fleet, measured over the same window.

On this shared 2-core machine the CPU level drifts by ±10 % between runs a
minute apart, as much as the effects measured. Run side by side, whatever
the machine does, it does to both, so their ratio holds where the absolute
figures do not. Used by bench/probe_ab.py (probes on against off) and
bench/version_ab.py (this checkout against another revision).

A Sentinel starved of CPU would read cheap, so each one's missed scrapes,
rule evaluations and probes over the window are read from its own /metrics,
as are its failed probes (a probe that fails fast reads cheap too): a pair
where either side missed work or had a probe fail is left out.
"""

from __future__ import annotations

import functools
import math
import os
import re
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.fleet import ROOT, _prepare, cpu_s, free_port, metrics, total

THREAD = re.compile(r'sentinel_thread_cpu_seconds_total\{thread="([^"]*)"\}')
# Threads named in the split: the I/O loop (scrapes, probes) and the scheduler's pool
# (rule groups, blocking sources); the rest (HTTP, notifier, main) are summed.
SHOWN = ("sentinel-io", "sentinel-jobs")
SETTLE_S = 50  # start-up, the first scrapes and the first probes of every target
# Counters of work a Sentinel could not do on time.
MISSED = ("sentinel_scrapes_missed_total", "sentinel_rule_group_iterations_missed_total",
          "sentinel_probes_missed_total")


@dataclass(frozen=True)
class Side:
    """One of the two Sentinels: its name, and how to start it.

    `command(work, listen)` writes its config into `work` and returns the
    command that serves it on `listen`; `env` is added to the environment.
    """

    name: str
    command: Callable[[Path, int], list[str]]
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Reading:
    """One side over one window: CPU seconds per second, work it missed, and CPU s/s by
    thread (`sentinel_thread_cpu_seconds_total`: the I/O loop, the rule pool, ...)."""

    cpu: float
    missed: float
    threads: dict[str, float] = field(default_factory=dict)
    failed_probes: float = 0.0


@dataclass(frozen=True)
class Counts:
    """A Sentinel's own counters at one moment: work missed so far, CPU seconds by thread."""

    missed: float
    threads: dict[str, float]
    failed_probes: float = 0.0


def counts(port: int) -> Counts:
    """Read a Sentinel's missed-work and per-thread CPU counters from its /metrics."""
    page = metrics(port)
    threads = {m.group(1): v for k, v in page.items()
               if (m := THREAD.fullmatch(k)) is not None}
    failed = sum(v for k, v in page.items()
                 if k.startswith("sentinel_probes_total{") and 'outcome="failure"' in k)
    return Counts(sum(total(page, name) for name in MISSED), threads, failed)


def side_by_side(sides: list[Side], seconds: float, pin: bool = False) -> dict[str, Reading]:
    """Start every side (in the order given), let them settle, measure one window.

    `pin`: each side runs on a CPU of its own (the first side on the first
    allowed CPU, and so on), so the two Sentinels never share a core; the
    fleet helper still runs anywhere.
    """
    cpus = sorted(os.sched_getaffinity(0))
    procs: dict[str, subprocess.Popen[bytes]] = {}
    ports: dict[str, int] = {}
    works = []
    try:
        for k, side in enumerate(sides):
            work = Path(tempfile.mkdtemp(prefix="sentinel-ab-"))
            works.append(work)
            ports[side.name] = free_port()
            cmd = side.command(work, ports[side.name])
            with open(work / "log", "wb") as log:
                procs[side.name] = subprocess.Popen(
                    cmd, stdout=log, stderr=subprocess.STDOUT,
                    preexec_fn=functools.partial(_prepare, {cpus[k % len(cpus)]} if pin else None),
                    # cwd: `python -m` puts it first on sys.path, ahead of PYTHONPATH.
                    # PYTHONPATH: this checkout's code, not whichever tree is installed
                    # (editable) for the interpreter, unless the side names its own.
                    cwd=work, env={**os.environ, "PYTHONPATH": str(ROOT), **dict(side.env)})
        time.sleep(SETTLE_S)
        for p in procs.values():
            if p.poll() is not None:
                raise SystemExit(f"a Sentinel exited during start-up; see the logs in {works}")
        before = {k: counts(port) for k, port in ports.items()}
        start = {k: cpu_s(p.pid) for k, p in procs.items()}
        t0 = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        # The CPU is read before the counters: rendering /metrics costs a Sentinel with
        # probes ~0.1 s more than one without (its per-target probe counters), which is
        # the bench's reading, not the daemon's work.
        end = {k: cpu_s(p.pid) for k, p in procs.items()}
        after = {k: counts(port) for k, port in ports.items()}
        return {k: Reading((end[k] - start[k]) / elapsed,
                           after[k].missed - before[k].missed,
                           {t: (v - before[k].threads.get(t, 0.0)) / elapsed
                            for t, v in after[k].threads.items()},
                           after[k].failed_probes - before[k].failed_probes)
                for k, p in procs.items()}
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(15)


def run_pairs(base: Side, other: Side, seconds: float, repeat: int, what: str,
              pin: bool = False) -> list[float]:
    """Measure `repeat` windows, swapping which side starts first (and, pinned, which CPU
    each gets); print each pair and return what `other` added to `base`'s CPU (a
    fraction) in the pairs neither starved."""
    added = []
    for i in range(repeat):
        order = [base, other] if i % 2 else [other, base]
        got = side_by_side(order, seconds, pin)
        b, o = got[base.name], got[other.name]
        share = (o.cpu - b.cpu) / max(1e-9, b.cpu)
        short = [f"{name} missed {r.missed:g}" for name, r in got.items() if r.missed]
        # A failing probe costs what its failure costs (a refused connection is cheap, a
        # timeout is not), not what a probe costs: such a pair measures something else.
        short += [f"{name} had {r.failed_probes:g} probes FAIL" for name, r in got.items()
                  if r.failed_probes]
        if not short:
            added.append(share)
        print(f"pair {i + 1}: {base.name} {b.cpu:.3f}, {other.name} {o.cpu:.3f} CPU s/s, "
              f"{what} {100 * share:+.1f} %"
              + (f"  LEFT OUT: {', '.join(short)}" if short else ""), flush=True)
        if b.threads and o.threads:
            print("        by thread, CPU s/s added: " + thread_split(b.threads, o.threads),
                  flush=True)
    return added


# Student's t, two-sided 95 %, by degrees of freedom (1-30); beyond, 2.0 is near enough.
_T95 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14,
        2.13, 2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05,
        2.05, 2.04)


def interval95(values: list[float]) -> str:
    """The mean of what probes added (fractions) and its 95 % interval, as percentages:
    one figure's spread says whether a method's median near a line is above it or noise."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"mean {100 * mean:+.1f} %"
    df = len(values) - 1
    half = (_T95[df - 1] if df <= len(_T95) else 2.0) * statistics.stdev(values) / math.sqrt(
        len(values))
    return f"mean {100 * mean:+.1f} %, 95 % interval {100 * (mean - half):+.1f} to " \
           f"{100 * (mean + half):+.1f} %"


def thread_split(base: dict[str, float], other: dict[str, float]) -> str:
    """What `other` added to `base`, per thread group (the largest first, the rest summed)."""
    added = {t: other.get(t, 0.0) - base.get(t, 0.0) for t in {*base, *other}}
    named = sorted((t for t in added if t in SHOWN), key=lambda t: -abs(added[t]))
    rest = sum(v for t, v in added.items() if t not in SHOWN)
    return ", ".join(f"{t} {added[t]:+.4f}" for t in named) + f", other threads {rest:+.4f}"
