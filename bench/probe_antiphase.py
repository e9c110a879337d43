"""What probes add to Sentinel's CPU: two Sentinels, their probes toggled in opposite phase.

The two ways of measuring it each leave one thing in:
- `bench/probe_ab.py` (two Sentinels, probes off and on, over the same
  window) cancels the machine's drift, but not what differs between two
  processes (memory layout, which core, where the fleet helper's work
  lands);
- `bench/probe_toggle.py` (one Sentinel, probes off and on in turn)
  cancels the process, but not the drift between windows.

Here both Sentinels run the whole time (each the daemon's `App` in a child
process, on a CPU of its own, on the fleet bench's config with probes at
their default interval) and toggle their probe jobs every window, in
opposite phase: in one window the first probes and the second does not,
in the next the other way round. Within a window the machine does the same
to both; across two windows each process, on its own core, is measured
both ways, so whatever makes one process or core dearer than the other
cancels: with r1 and r2 the two windows' CPU ratios (probing side over
the other), probes add sqrt(r1 * r2) - 1. Windows sit on the rule groups'
grid and measure a multiple of 30 s, as in `bench/probe_toggle.py`.

The probe series stay in both stores throughout, so the rules that read
them cost the same on both sides; that part comes from `bench/ruleeval.py`
(with and without them) and is added to each pair's figure.

    python bench/probe_antiphase.py [--targets 1000] [--window 30] [--pairs 8]
                                    [--rule-runs 2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleet import FleetProcess, _raise_fd_limit  # noqa: E402
from bench.pairs import interval95  # noqa: E402
from bench.probe_toggle import (  # noqa: E402
    SHOWN,
    WARM_S,
    ToggledSentinel,
    _sleep_until,
    add_arguments,
    check_window,
    first_toggle,
    rule_part,
)

START_SLACK_S = 20.0  # the children import and start their Apps before the warm-up counts


def child(phase: int, ports: list[int], start_after: float, window_s: int, windows: int,
          ) -> None:
    """One side: probes on in windows where (window + phase) is even; a JSON line a window."""
    sentinel = ToggledSentinel(ports)
    try:
        step = sentinel.step
        start = first_toggle(step, start_after)
        for k in range(windows):
            _sleep_until(start)
            sentinel.set_probes((k + phase) % 2 == 0)
            _sleep_until(start + step)
            start += step + window_s
            cpu, split, missed = sentinel.measure_until(start)
            print(json.dumps({"window": k, "on": sentinel.on, "cpu": cpu, "threads": split,
                              "missed": missed}), flush=True)
    finally:
        sentinel.stop()


def run_sides(targets: int, window_s: int, windows: int) -> list[list[dict]]:
    """Both sides' readings, window by window: [side 0's, side 1's]."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("two CPUs are needed: one for each Sentinel")
    fleet = FleetProcess(targets, traffic="idle")  # the helper runs anywhere
    try:
        start_after = time.time() + START_SLACK_S + WARM_S
        procs = []
        for phase in (0, 1):
            cmd = [sys.executable, __file__, "--child", str(phase), "--start", str(start_after),
                   "--window", str(window_s), "--windows", str(windows),
                   "--ports", ",".join(map(str, fleet.ports))]
            procs.append(subprocess.Popen(
                cmd, stdout=subprocess.PIPE, text=True,
                preexec_fn=lambda c=cpus[phase]: (_raise_fd_limit(),
                                                  os.sched_setaffinity(0, {c}))))
        out = []
        for p in procs:
            lines = p.communicate()[0].splitlines()
            if p.returncode:
                raise SystemExit(f"a Sentinel side failed (exit {p.returncode})")
            out.append([json.loads(line) for line in lines if line.startswith("{")])
        return out
    finally:
        fleet.stop()


def main() -> None:
    """Parse arguments, run both sides, print what probes add, pair by pair."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--pairs", type=int, default=8, help="pairs of windows (each side probes "
                    "in one of each pair)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--windows", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ports", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child, [int(p) for p in args.ports.split(",")], args.start, args.window,
              args.windows)
        return
    check_window(args.window)
    _raise_fd_limit()
    sides = run_sides(args.targets, args.window, 2 * args.pairs)
    rules = rule_part(args.targets, args.rule_runs) if args.rule_runs else 0.0
    added, by_thread = [], {n: [] for n in SHOWN}
    for i in range(args.pairs):
        ratios, raw, missed = [], [], 0.0
        for k in (2 * i, 2 * i + 1):
            a, b = sides[0][k], sides[1][k]
            on, off = (a, b) if a["on"] else (b, a)
            ratios.append((on["cpu"] + rules) / off["cpu"])
            raw.append(f"{on['cpu']:.4f}/{off['cpu']:.4f}")
            missed += a["missed"] + b["missed"]
            for n in SHOWN:
                by_thread[n].append(on["threads"][n] - off["threads"][n])
        pair = math.sqrt(ratios[0] * ratios[1]) - 1
        print(f"pair {i + 1}: " + ", ".join(f"window {2 * i + j + 1} {100 * (r - 1):+.1f} %"
                                           for j, r in enumerate(ratios))
              + f": probes add {100 * pair:+.1f} % (on/off CPU s/s {', '.join(raw)})"
              + (f"  (left out: {missed:g} missed)" if missed else ""), flush=True)
        if not missed:
            added.append(pair)
    for n, values in by_thread.items():
        print(f"  {n} added, median of windows: {statistics.median(values):+.4f} CPU s/s")
    if not added:
        raise SystemExit("every pair missed work: use fewer --targets")
    print(f"probes add {100 * statistics.median(added):+.1f} % to Sentinel's CPU, median of "
          f"{len(added)} pairs ({args.targets} idle targets, probes every 15 s, every canary "
          f"sent, rules' part {rules:+.4f} CPU s/s included)")
    print(interval95(added))


if __name__ == "__main__":
    main()
