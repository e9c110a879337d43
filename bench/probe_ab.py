"""What probes add to Sentinel's CPU, with two Sentinels measured over the same window.

`bench/fleet.py --probes both` runs probes off and on one after the other;
on this shared 2-core machine the level drifts by ±10 % between runs a
minute apart, as much as the effect measured. Here one fleet helper serves
two Sentinels at once, one with probes at the default interval and one
without, and both are measured over the same 60 s window: whatever the
machine does, it does to both. Each repeat swaps which one starts first.

    python bench/probe_ab.py [--targets 1000] [--seconds 60] [--repeat 3]
                             [--traffic idle|busy]

Each line prints both CPU figures (s/s) and what probes added; the last,
the median. Both Sentinels share the cores with each other and with the
helper, so the absolute figures run higher than a Sentinel alone; the
ratio is the measure. A Sentinel starved of CPU would read cheap, so each
one's missed scrapes, rule evaluations and probes over the window are read
from its own /metrics: a pair where either missed work is marked SATURATED
and left out of the median.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleet import (  # noqa: E402
    FleetProcess,
    _raise_fd_limit,
    cpu_s,
    free_port,
    metrics,
    sentinel_cmd,
    total,
)

SETTLE_S = 50  # start-up, the first scrapes and the first probes of every target
# Counters of work a Sentinel could not do on time.
MISSED = ("sentinel_scrapes_missed_total", "sentinel_rule_group_iterations_missed_total",
          "sentinel_probes_missed_total")


def missed(port: int) -> float:
    """All the work a Sentinel reports it missed, so far."""
    page = metrics(port)
    return sum(total(page, name) for name in MISSED)


def measure(fleet: FleetProcess, seconds: float,
            on_first: bool) -> tuple[float, float, dict[bool, float]]:
    """CPU s/s of (probes off, probes on) over one window, both running together, and the
    work each missed in it (by probes on/off)."""
    procs: dict[bool, subprocess.Popen[bytes]] = {}
    ports: dict[bool, int] = {}
    works = []
    try:
        for probes in (True, False) if on_first else (False, True):
            work = Path(tempfile.mkdtemp(prefix="sentinel-probe-ab-"))
            works.append(work)
            ports[probes] = free_port()
            cmd = sentinel_cmd(work, fleet.ports, ports[probes], probes)
            with open(work / "log", "wb") as log:
                procs[probes] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                 preexec_fn=_raise_fd_limit)
        time.sleep(SETTLE_S)
        for p in procs.values():
            if p.poll() is not None:
                raise SystemExit(f"a Sentinel exited during start-up; see {works}")
        before = {k: missed(port) for k, port in ports.items()}
        start = {k: cpu_s(p.pid) for k, p in procs.items()}
        t0 = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        used = {k: (cpu_s(p.pid) - start[k]) / elapsed for k, p in procs.items()}
        lost = {k: missed(port) - before[k] for k, port in ports.items()}
        return used[False], used[True], lost
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(15)


def main() -> None:
    """Parse arguments, start the fleet, measure the pairs, print them and the median."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window per pair")
    ap.add_argument("--repeat", type=int, default=3, help="pairs to measure")
    ap.add_argument("--traffic", choices=["idle", "busy"], default="idle",
                    help="idle: counters still, every canary sent; busy: counters moving, "
                         "canaries skipped")
    args = ap.parse_args()
    _raise_fd_limit()
    fleet = FleetProcess(args.targets, traffic=args.traffic)
    added = []
    try:
        for i in range(args.repeat):
            off, on, lost = measure(fleet, args.seconds, on_first=i % 2 == 0)
            share = (on - off) / max(1e-9, off)
            short = [f"probes {'on' if k else 'off'} missed {v:g}" for k, v in lost.items() if v]
            if not short:
                added.append(share)
            print(f"pair {i + 1}: off {off:.3f}, on {on:.3f} CPU s/s, "
                  f"probes added {100 * share:+.1f} %"
                  + (f"  SATURATED: {', '.join(short)}" if short else ""), flush=True)
    finally:
        fleet.stop()
    if not added:
        raise SystemExit("every pair missed work: this machine cannot run two Sentinels "
                         "and the fleet at once; use fewer --targets")
    print(f"median added {100 * statistics.median(added):+.1f} % over {len(added)} pairs "
          f"({args.targets} targets, {args.traffic}, {args.seconds:g} s windows)")


if __name__ == "__main__":
    main()
