"""The daemon's probe path alone: CPU per probe round, probes spread one by one or in slots.

`ProbeJobs` on `ScrapeJobs` timers on one I/O loop, with the store, as in
the daemon, but no scrapes and no rules, against the fleet helper's idle
targets (/health and a streamed 2-token canary every round). 200 targets
at a 3 s interval make the 66.7 rounds a second of 1,000 targets at 15 s.

Each measurement runs in a child process, so `time.process_time()` is the
probe path's alone (the helper is another process). The children set
glibc's mmap and trim thresholds: a fresh process otherwise maps and unmaps
each 256 KiB socket read buffer (asyncio's), which the long-running daemon
does not (see the issue 12 notes), and the daemon's garbage-collector
thresholds (`sentinel.daemon.gcpolicy`). Runs alternate between the two layouts
because the machine drifts:

- spread: each target at its own hashed millisecond (`PROBE_SLOT_MS` = 1);
- slots: the daemon's 250 ms slots, a few targets' probes sharing each
  wake-up of the loop.

    python bench/probe_jobs.py [--targets 200] [--interval 3] [--seconds 20] [--runs 3]

What probes add to a whole Sentinel (scrapes and rules beside them) is
`bench/probe_ab.py`'s figure; this one says what the probe path costs by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MALLOC = {"MALLOC_MMAP_THRESHOLD_": "1048576", "MALLOC_TRIM_THRESHOLD_": "8388608"}
WARM_S = 8.0  # connections open, /v1/models learnt, every target probed once


def child(ports: list[int], interval_s: float, seconds: float, slot_ms: int) -> None:
    """Probe the targets on the daemon's path for `seconds`; print CPU s/s as JSON."""
    from prometheus_client import CollectorRegistry

    import sentinel.daemon.probejobs as probejobs
    from sentinel.collect.ioloop import IOLoop
    from sentinel.config import parse_config
    from sentinel.daemon import gcpolicy
    from sentinel.daemon.missed import MissedWork
    from sentinel.daemon.scrapejobs import ScrapeJobs
    from sentinel.store import MemoryStore

    gcpolicy.tune()  # the daemon's collector thresholds, not Python's defaults
    probejobs.PROBE_SLOT_MS = slot_ms
    config = parse_config({
        "probe_interval": f"{interval_s:g}s",
        "targets": [{"name": f"t{i}", "url": f"http://127.0.0.1:{p}",
                     "probe": {"timeout": f"{min(2.0, interval_s):g}s"}}
                    for i, p in enumerate(ports)]})
    io = IOLoop().start()
    registry = CollectorRegistry()
    jobs = ScrapeJobs(io, None, MissedWork(registry))  # type: ignore[arg-type]
    probes = probejobs.ProbeJobs(config, MemoryStore(), registry,
                                 lambda: int(time.time() * 1000), io)
    probes.schedule(jobs, int(time.time() * 1000))
    time.sleep(WARM_S)
    cpu0, t0 = time.process_time(), time.monotonic()
    time.sleep(seconds)
    used = (time.process_time() - cpu0) / (time.monotonic() - t0)
    missed = sum(s.value for m in registry.collect() if m.name == "sentinel_probes_missed"
                 for s in m.samples if s.name.endswith("_total"))
    jobs.stop()
    probes.close()
    io.stop()
    print(json.dumps({"cpu": used, "missed": missed}))


def measure(ports: list[int], interval_s: float, seconds: float, slot_ms: int) -> dict:
    """One child run; its CPU s/s and missed probes."""
    cmd = [sys.executable, __file__, "--child", str(slot_ms), "--interval", str(interval_s),
           "--seconds", str(seconds), "--ports", ",".join(map(str, ports))]
    out = subprocess.run(cmd, env={**os.environ, **MALLOC}, capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    """Parse arguments, start the fleet, alternate the two layouts, print ms per round."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=200)
    ap.add_argument("--interval", type=float, default=3.0, help="probe interval, seconds")
    ap.add_argument("--seconds", type=float, default=20.0, help="measured window per run")
    ap.add_argument("--runs", type=int, default=3, help="runs of each layout")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ports", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child([int(p) for p in args.ports.split(",")], args.interval, args.seconds, args.child)
        return

    from bench.fleet import FleetProcess, _raise_fd_limit
    from sentinel.daemon.probejobs import PROBE_SLOT_MS

    _raise_fd_limit()
    fleet = FleetProcess(args.targets, traffic="idle")
    rounds_per_s = args.targets / args.interval
    per_round: dict[str, list[float]] = {"spread": [], "slots": []}
    try:
        for run in range(args.runs):
            order = [("spread", 1), ("slots", PROBE_SLOT_MS)]
            for name, slot in order if run % 2 == 0 else order[::-1]:
                r = measure(fleet.ports, args.interval, args.seconds, slot)
                per_round[name].append(1000 * r["cpu"] / rounds_per_s)
                print(f"run {run + 1} {name:6s}: {r['cpu']:.4f} CPU s/s, "
                      f"{per_round[name][-1]:.3f} ms a round"
                      + (f", {r['missed']:g} probes MISSED" if r["missed"] else ""), flush=True)
    finally:
        fleet.stop()
    spread, slots = (statistics.median(per_round[k]) for k in ("spread", "slots"))
    print(f"median ms a round: spread {spread:.3f}, {PROBE_SLOT_MS} ms slots {slots:.3f} "
          f"({100 * (slots / spread - 1):+.0f} %), {args.targets} targets every "
          f"{args.interval:g} s")


if __name__ == "__main__":
    main()
