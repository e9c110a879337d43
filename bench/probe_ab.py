"""What probes add to Sentinel's CPU, with two Sentinels measured over the same window.

`bench/fleet.py --probes both` runs probes off and on one after the other;
on this shared 2-core machine the level drifts by ±10 % between runs a
minute apart, as much as the effect measured. Here one fleet helper serves
two Sentinels at once, one with probes at the default interval and one
without, and both are measured over the same 60 s window (bench/pairs.py):
whatever the machine does, it does to both. Each repeat swaps which one
starts first.

    python bench/probe_ab.py [--targets 1000] [--seconds 60] [--repeat 3]
                             [--traffic idle|busy] [--canary-ttft SECONDS] [--pin]

Each line prints both CPU figures (s/s) and what probes added; the last,
the median. Both Sentinels share the cores with each other and with the
helper, so the absolute figures run higher than a Sentinel alone; the
ratio is the measure. A Sentinel starved of CPU would read cheap, so each
one's missed scrapes, rule evaluations and probes over the window are read
from its own /metrics, as are its failed probes (one that fails fast reads
cheap too): a pair where either missed work or had a probe fail is marked
LEFT OUT and not counted. Under each pair, what probes added is split by
thread (`sentinel_thread_cpu_seconds_total`): the I/O loop, where the probes
themselves run, against the rule pool, where the rules that read them run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleet import FleetProcess, _raise_fd_limit, sentinel_cmd  # noqa: E402
from bench.pairs import Side, interval95, run_pairs  # noqa: E402


def main() -> None:
    """Parse arguments, start the fleet, measure the pairs, print them and the median."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window per pair")
    ap.add_argument("--repeat", type=int, default=3, help="pairs to measure")
    ap.add_argument("--traffic", choices=["idle", "busy"], default="idle",
                    help="idle: counters still, every canary sent; busy: counters moving, "
                         "canaries skipped")
    ap.add_argument("--canary-ttft", type=float, default=None, metavar="SECONDS",
                    help="the targets' time to first token for a canary (default: the fleet "
                         "helper's, 20 ms; the seeds' idle Gemma figure is 0.3)")
    ap.add_argument("--pin", action="store_true",
                    help="run each Sentinel on a CPU of its own (swapped between pairs), "
                         "so their rule pools do not compete for one core; the fleet "
                         "helper runs anywhere")
    args = ap.parse_args()
    _raise_fd_limit()
    fleet = FleetProcess(args.targets, traffic=args.traffic, ttft_s=args.canary_ttft)
    try:
        off = Side("off", lambda work, port: sentinel_cmd(work, fleet.ports, port, False))
        on = Side("on", lambda work, port: sentinel_cmd(work, fleet.ports, port, True))
        added = run_pairs(off, on, args.seconds, args.repeat, "probes added", args.pin)
    finally:
        fleet.stop()
    if not added:
        raise SystemExit("every pair was left out (see above): missed work means this "
                         "machine cannot run two Sentinels and the fleet at once (use "
                         "fewer --targets); failed probes, a fleet helper in trouble")
    print(f"median added {100 * statistics.median(added):+.1f} % over {len(added)} pairs "
          f"({args.targets} targets, {args.traffic}, {args.seconds:g} s windows"
          + (", pinned" if args.pin else "")
          + (f", canary TTFT {args.canary_ttft:g} s" if args.canary_ttft is not None else "")
          + ")")
    print(interval95(added))


if __name__ == "__main__":
    main()
