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
ratio is the measure.
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
    sentinel_cmd,
)

SETTLE_S = 50  # start-up, the first scrapes and the first probes of every target


def measure(fleet: FleetProcess, seconds: float, on_first: bool) -> tuple[float, float]:
    """CPU s/s of (probes off, probes on) over one window, both running together."""
    procs: dict[bool, subprocess.Popen[bytes]] = {}
    works = []
    try:
        for probes in (True, False) if on_first else (False, True):
            work = Path(tempfile.mkdtemp(prefix="sentinel-probe-ab-"))
            works.append(work)
            cmd = sentinel_cmd(work, fleet.ports, free_port(), probes)
            with open(work / "log", "wb") as log:
                procs[probes] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                 preexec_fn=_raise_fd_limit)
        time.sleep(SETTLE_S)
        for p in procs.values():
            if p.poll() is not None:
                raise SystemExit(f"a Sentinel exited during start-up; see {works}")
        start = {k: cpu_s(p.pid) for k, p in procs.items()}
        t0 = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        used = {k: (cpu_s(p.pid) - start[k]) / elapsed for k, p in procs.items()}
        return used[False], used[True]
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
            off, on = measure(fleet, args.seconds, on_first=i % 2 == 0)
            added.append((on - off) / max(1e-9, off))
            print(f"pair {i + 1}: off {off:.3f}, on {on:.3f} CPU s/s, "
                  f"probes added {100 * added[-1]:+.1f} %", flush=True)
    finally:
        fleet.stop()
    print(f"median added {100 * statistics.median(added):+.1f} % over {len(added)} pairs "
          f"({args.targets} targets, {args.traffic}, {args.seconds:g} s windows)")


if __name__ == "__main__":
    main()
