"""How many canaries the fleet-wide cap lets through, at a given canary latency.

A canary waits for a slot under `probe_canary_concurrency` at most its
interval less its timeout (5 s by default); past that it is not sent this
time (`sentinel_probe_canaries_capped_total`), and the one probe that sees
a stalled idle engine does not run. Whether a cap is enough depends on the
fleet's size and on how long a canary takes: the fleet helper
(bench/fleet.py) answers it after `--canary-ttft` (default 0.3 s, the
seeds' idle time to first token for Gemma on TPU v6e), then 5 ms a token.

For each cap in turn, one Sentinel probes the idle fleet at the default
interval; over the window it prints canaries sent and capped a second, the
share capped, and Sentinel's CPU.

    python bench/canary_cap.py [--targets 1000] [--caps 4,16,64] [--canary-ttft 0.3]
                               [--seconds 60]
"""

from __future__ import annotations

import argparse
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
)
from bench.pairs import SETTLE_S  # noqa: E402


def canaries(port: int) -> tuple[float, float]:
    """(canaries run, canaries capped) so far, fleet-wide."""
    page = metrics(port)
    run = sum(v for k, v in page.items()
              if k.startswith("sentinel_probes_total{") and 'probe="canary"' in k)
    capped = sum(v for k, v in page.items()
                 if k.startswith("sentinel_probe_canaries_capped_total{"))
    return run, capped


def measure(fleet: FleetProcess, cap: int, seconds: float) -> tuple[float, float, float]:
    """(canaries sent a second, capped a second, CPU s/s) of one Sentinel with this cap."""
    work = Path(tempfile.mkdtemp(prefix="sentinel-cap-"))
    port = free_port()
    cmd = sentinel_cmd(work, fleet.ports, port, probes=True, canary_cap=cap)
    with open(work / "log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=work,
                                preexec_fn=_raise_fd_limit)
    try:
        time.sleep(SETTLE_S)
        if proc.poll() is not None:
            raise SystemExit(f"Sentinel exited during start-up; see {work / 'log'}")
        run0, capped0 = canaries(port)
        cpu0, t0 = cpu_s(proc.pid), time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        run1, capped1 = canaries(port)
        return ((run1 - run0) / elapsed, (capped1 - capped0) / elapsed,
                (cpu_s(proc.pid) - cpu0) / elapsed)
    finally:
        proc.terminate()
        proc.wait(15)


def main() -> None:
    """Parse arguments, start the fleet, measure each cap, print a line each."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--caps", default="4,16,64", help="comma-separated caps to measure")
    ap.add_argument("--canary-ttft", type=float, default=0.3, metavar="SECONDS")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window per cap")
    args = ap.parse_args()
    _raise_fd_limit()
    fleet = FleetProcess(args.targets, traffic="idle", ttft_s=args.canary_ttft)
    due = args.targets / 15  # canaries due a second at the default interval
    try:
        print(f"{args.targets} idle targets, canary {args.canary_ttft:g} s to first token: "
              f"{due:.1f} canaries due a second", flush=True)
        for cap in (int(c) for c in args.caps.split(",")):
            sent, capped, cpu = measure(fleet, cap, args.seconds)
            share = capped / max(1e-9, sent + capped)
            print(f"cap {cap:4d}: {sent:5.1f} sent/s, {capped:5.1f} capped/s "
                  f"({100 * share:.0f} % not sent), {cpu:.3f} CPU s/s", flush=True)
    finally:
        fleet.stop()


if __name__ == "__main__":
    main()
