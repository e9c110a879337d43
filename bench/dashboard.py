"""What does a Grafana panel cost through Sentinel at fleet size?

Run: `python bench/dashboard.py [--targets 200] [--minutes 30] [--step 15]`

Fills a MemoryStore through the scrape path's own series code (the real vLLM
page of tests/data, counters growing, one scrape every 5 s per target, the
store filter of the shipped rules) for `--minutes`, then times every query of
deploy/grafana/fleet.json as Grafana sends it (variables at "All",
`$__rate_interval` = 1m) as a range query over the whole filled span at
`--step` seconds: in process (`evaluate_range`, the engine alone) and through
Sentinel's listener on loopback (`POST /api/v1/query_range`: HTTP, the query
pool's forked child, JSON). Prints CPU and wall time per query and in all, the
steps, and the series each returns.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402
from ruleeval import RULES, pages  # noqa: E402

from sentinel.api.auth import Auth  # noqa: E402
from sentinel.api.promdata import engine_steps, evaluate_range  # noqa: E402
from sentinel.api.routes import data_source_routes  # noqa: E402
from sentinel.api.service import ApiService  # noqa: E402
from sentinel.collect.scrapeseries import SharedSeries, TargetSeries  # noqa: E402
from sentinel.daemon.http import StatusServer  # noqa: E402
from sentinel.promql.engine import Engine  # noqa: E402
from sentinel.rules.loader import load_rule_files  # noqa: E402
from sentinel.rules.needs import needed_series  # noqa: E402
from sentinel.store.memory import MemoryStore  # noqa: E402

FLEET = ROOT / "deploy" / "grafana" / "fleet.json"


def queries() -> list[str]:
    """The dashboard's expressions, variables at "All"."""
    doc = json.loads(FLEET.read_text())
    return [t["expr"].replace("$__rate_interval", "1m").replace('"$target"', '".*"')
            .replace('"$pool"', '".*"') for p in doc["panels"] for t in p.get("targets", [])]


def fill(targets: int, minutes: float) -> tuple[MemoryStore, int, int]:
    """A store of `targets` vLLM servers scraped every 5 s; (store, first, last time)."""
    store = MemoryStore(retention_ms=int((minutes + 5) * 60_000))
    store.set_filter(needed_series(load_rule_files(RULES)))
    shared = SharedSeries(store)
    series = [TargetSeries(shared, f"t{i}", {"target": f"t{i}", "pool": f"p{i % 4}"})
              for i in range(targets)]
    t0 = 1_700_000_000_000
    texts = pages(int(minutes * 12) + 1)
    for step, text in enumerate(texts):
        page = series[0].parse(text, False)
        for i, ts in enumerate(series):
            t = t0 + step * 5000 + i % 5000
            ts.store_page(page, t)
            ts.report(t, True, 0.01, 1000)
    return store, t0, t0 + (len(texts) - 1) * 5000


def main() -> None:
    """Fill, then time each query both ways."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=200)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--step", type=int, default=15, help="range query step, seconds")
    args = ap.parse_args()
    store, start, end = fill(args.targets, args.minutes)
    engine = Engine(store)
    service = ApiService(None, query_fn=engine.query,  # type: ignore[arg-type]
                         clock=lambda: end / 1000)
    server = StatusServer("127.0.0.1", 0, CollectorRegistry(), lambda: None,
                          data_source_routes(service, Auth([], reads_open=True)))
    server.start()
    url = f"http://127.0.0.1:{server.address[1]}/api/v1/query_range"
    steps = (end - start) // (args.step * 1000) + 1
    print(f"{args.targets} targets, {store.series_count()} series, {args.minutes:g} min; "
          f"range queries of {steps} steps")
    print(f"{'engine CPU s':>12} {'HTTP wall s':>11} {'series':>6}  query")
    total_cpu = total_wall = 0.0
    try:
        with httpx.Client(timeout=120) as client:
            for expr in queries():
                c0 = time.process_time()
                step_ms = args.step * 1000
                matrix = evaluate_range(engine_steps(engine, expr, start, end, step_ms),
                                        start, end, step_ms, timeout_s=600)
                cpu = time.process_time() - c0
                w0 = time.monotonic()
                r = client.post(url, data={"query": expr, "start": str(start / 1000),
                                           "end": str(end / 1000), "step": str(args.step)})
                wall = time.monotonic() - w0
                body = r.json()
                shown = len(body["data"]["result"]) if r.status_code == 200 else body["error"]
                total_cpu, total_wall = total_cpu + cpu, total_wall + wall
                print(f"{cpu:12.3f} {wall:11.3f} {len(matrix):>6}  {expr[:90]} ({shown})")
    finally:
        server.stop()
    print(f"{total_cpu:12.3f} {total_wall:11.3f}         all {len(queries())} queries")


if __name__ == "__main__":
    main()
