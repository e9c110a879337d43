"""Ingest benchmark: a vLLM /metrics page parsed and stored, against prometheus_client's parser.

Run: `python bench/ingest.py [--seconds 2]`. The page comes from the vLLM
simulator (`sentinel.sim`); when that cannot start, from
tests/data/vllm_metrics.txt (the output says which). Measures:

  (a) Sentinel parse + store, warm: repeated scrapes of one target with a new
      timestamp each time (what the daemon does every interval);
  (b) Sentinel cold: the plain parser, and parse + store into a fresh store;
  (c) prometheus_client.parser.text_string_to_metric_families, consumed fully.

Design target (design.md): (a) at least 10x (c).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sentinel.collect.exposition import parse_exposition
from sentinel.collect.scrape import Scraper, ScrapeTarget
from sentinel.store.memory import MemoryStore

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm_metrics.txt"


def get_page() -> tuple[str, str]:
    """The page text and where it came from."""
    try:
        from sentinel.sim.server import start_sim

        sim = start_sim()
        try:
            text = httpx.get(sim.url + "/metrics", timeout=10).text
        finally:
            sim.stop()
        return text, f"simulator ({sim.url}/metrics)"
    except Exception as e:  # the simulator is optional for this benchmark
        return FIXTURE.read_text(), f"{FIXTURE} (simulator unavailable: {e})"


def rate(fn: Callable[[int], None], seconds: float) -> float:
    """Calls per second of fn(i), run for about `seconds` after a short warm-up."""
    for i in range(3):
        fn(i)
    n, start = 0, time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(10):
            fn(n)
            n += 1
    return n / (time.perf_counter() - start)


def main() -> None:
    """Run the three measurements and print pages/s, samples/s and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    args = ap.parse_args()
    text, source = get_page()
    samples = len(parse_exposition(text))
    print(f"page: {source}")
    print(f"page size: {len(text.encode())} bytes, {len(text.splitlines())} lines, "
          f"{samples} samples")

    store = MemoryStore(retention_ms=10**12)
    scraper = Scraper(store)
    target = ScrapeTarget("bench", "http://127.0.0.1:8000")
    t0 = 1_700_000_000_000

    def warm(i: int) -> None:
        result = scraper.ingest(target, text, t0 + 5_000 * i)
        if not result.up:
            raise SystemExit(f"ingest failed: {result.error}")

    def cold_ingest(i: int) -> None:
        Scraper(MemoryStore()).ingest(target, text, t0)  # ingest starts no I/O loop

    def cold_parse(i: int) -> None:
        parse_exposition(text)

    def prom(i: int) -> None:
        for family in text_string_to_metric_families(text):
            for _ in family.samples:
                pass

    rows = [
        ("(a) sentinel parse+store, warm", rate(warm, args.seconds)),
        ("(b) sentinel parse+store, cold", rate(cold_ingest, args.seconds)),
        ("(b) sentinel parse only, cold", rate(cold_parse, args.seconds)),
        ("(c) prometheus_client parser", rate(prom, args.seconds)),
    ]
    scraper.close()
    baseline = rows[-1][1]
    width = max(len(name) for name, _ in rows)
    for name, pages in rows:
        print(f"{name:<{width}}  {pages:10.1f} pages/s  {pages * samples:12.0f} samples/s"
              f"  {pages / baseline:6.1f}x (c)")
    ratio = rows[0][1] / baseline
    verdict = "meets" if ratio >= 10 else "MISSES"
    print(f"warm ingest is {ratio:.1f}x prometheus_client: {verdict} the 10x target")


if __name__ == "__main__":
    main()
