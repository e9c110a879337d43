"""What a probe costs Sentinel in CPU, against what a scrape costs, on the same target.

The simulator runs in a child process (`sentinel sim`), so only Sentinel's
side is measured: `time.process_time()` of this process (every thread,
including the I/O loop the probes run on) over N scrapes, N probes with the
canary, and N probes with the canary skipped (a busy target), interleaved
run by run because the machine is noisy. The projection compares CPU per
second per target at the default intervals (scrape every 5 s, probe every
15 s): probes add `probe_cost/15 s` to `scrape_cost/5 s`. Scraping is only
part of Sentinel's work (rules, incidents), so that ratio is an upper bound
on the share probes add.

This bench measures one target at a time, each call handed to the I/O loop
from this thread (the scrape's and the probe's alike). The 1,000-target
figure is the fleet bench's: `python bench/fleet.py --targets 1000
--systems sentinel --probes both --traffic idle|busy`.

    python bench/probe.py [--n 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from sentinel.collect.probe import ProbeTarget  # noqa: E402
from sentinel.collect.probe_runner import ProbeRunner  # noqa: E402
from sentinel.collect.scrape import Scraper, ScrapeTarget  # noqa: E402
from sentinel.store import MemoryStore  # noqa: E402

SCRAPE_INTERVAL_S = 5.0
PROBE_INTERVAL_S = 15.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_sim() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sentinel", "sim", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/health", timeout=1)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the simulator did not start")


def _cpu_per_call(fn, n: int) -> float:  # noqa: ANN001
    fn()  # warm: connections, caches
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n


class _Busy(ProbeRunner):
    """A runner whose heartbeat always reports tokens flowing (the canary is skipped)."""

    def __init__(self) -> None:
        super().__init__(4)
        self.heartbeat.busy = lambda t, now_ms: True  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="calls per measurement")
    parser.add_argument("--runs", type=int, default=3, help="interleaved repetitions")
    args = parser.parse_args()
    proc, url = _start_sim()
    scraper = Scraper(MemoryStore())
    full, busy = ProbeRunner(4), _Busy()
    st = ScrapeTarget("bench", url)
    pt = ProbeTarget("bench", url)
    rows: list[tuple[float, float, float]] = []
    try:
        for run in range(args.runs):
            scrape = _cpu_per_call(lambda: scraper.scrape(st, int(time.time() * 1000)), args.n)
            probe = _cpu_per_call(lambda: full.probe(pt, 0), args.n)
            skipped = _cpu_per_call(lambda: busy.probe(pt, 0), args.n)
            rows.append((scrape, probe, skipped))
            print(f"run {run + 1}: CPU per scrape {scrape * 1e3:.2f} ms, per probe "
                  f"{probe * 1e3:.2f} ms (canary), {skipped * 1e3:.2f} ms (canary skipped); "
                  f"probe/scrape {probe / scrape:.2f}x")
    finally:
        full.close()
        busy.close()
        scraper.close()
        proc.terminate()
        proc.wait(5)
    scrape = statistics.median(r[0] for r in rows)
    probe = statistics.median(r[1] for r in rows)
    skipped = statistics.median(r[2] for r in rows)
    added = (probe / PROBE_INTERVAL_S) / (scrape / SCRAPE_INTERVAL_S)
    added_busy = (skipped / PROBE_INTERVAL_S) / (scrape / SCRAPE_INTERVAL_S)
    print(f"median: scrape {scrape * 1e3:.2f} ms, probe {probe * 1e3:.2f} ms, "
          f"probe without canary {skipped * 1e3:.2f} ms CPU")
    print(f"at the default intervals (scrape {SCRAPE_INTERVAL_S:g} s, probe "
          f"{PROBE_INTERVAL_S:g} s) probes add {added:.0%} of the scrape CPU per target "
          f"({added_busy:.0%} when the canary is skipped); per 1,000 targets that is "
          f"{1000 * probe / PROBE_INTERVAL_S:.2f} CPU-s/s for probes vs "
          f"{1000 * scrape / SCRAPE_INTERVAL_S:.2f} for scrapes (sequential, this machine)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
