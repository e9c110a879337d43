"""Rule evaluation and store memory at fleet size, without the network.

Run: `python bench/ruleeval.py --targets 1000 [--minutes 6] [--rounds 3] [--probes]
[--gc held|daemon|python] [--parse-once] [--no-fused]` (`--targets 5000 --parse-once` for the
fleet size of issue 40 in a few minutes).

Fills a MemoryStore through the scrape path's own series code (the real
vLLM page of tests/data, its counters growing, one scrape every 5 s per
target, the store filter the shipped rules compute) for the retention the
rules need, then evaluates every rule of rules/vllm.yaml and
rules/sentinel.yaml at the last scrape time (with `--probes`, the probe
series too: what the rules reading them cost). Prints the CPU seconds of one
evaluation of all rules (best of --rounds) and of each rule group, the
store's series and samples, and the Python heap the store holds
(tracemalloc), so a change to the store or the engine can be measured in
seconds instead of a fleet run.

`--no-fused` evaluates every rule the general way, without the one-pass
aggregations of range functions (sentinel/promql/fused.py): run both to see
what they save.

`--gc` says how the cyclic collector runs during the evaluations: `held`
(the default) as in the daemon, off for each pass (`gcpolicy.evaluation_hold`);
`daemon`, the daemon's thresholds without the hold; `python`, Python's
defaults (what this bench measured before the hold).
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
import time
import tracemalloc
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sentinel.collect.probe import ProbeResult, ProbeTarget, samples_of  # noqa: E402
from sentinel.collect.scrapeseries import SharedSeries, TargetSeries  # noqa: E402
from sentinel.daemon import gcpolicy  # noqa: E402
from sentinel.promql import fused  # noqa: E402
from sentinel.promql.engine import Engine, max_lookback_ms  # noqa: E402
from sentinel.rules.loader import load_rule_files  # noqa: E402
from sentinel.rules.needs import needed_series  # noqa: E402
from sentinel.store.memory import MemoryStore  # noqa: E402

PAGE = ROOT / "tests" / "data" / "vllm_metrics.txt"
RULES = [str(ROOT / "rules" / "vllm.yaml"), str(ROOT / "rules" / "sentinel.yaml")]
PROBE_RESULTS = [ProbeResult("health", True, 0.001, 200),
                 ProbeResult("canary", True, 0.03, 200, ttft_s=0.02)]
_COUNTER = re.compile(r"^([^#\s][^ ]*?(?:_total|_count|_sum|_bucket)(?:\{[^}]*\})?) (\S+)$", re.M)


def pages(n: int) -> list[str]:
    """n versions of the page, counters grown by k in version k."""
    text = PAGE.read_text()
    return [_COUNTER.sub(lambda m, k=k: f"{m.group(1)} {float(m.group(2)) + k:g}", text)
            for k in range(n)]


def main() -> None:
    """Fill the store, evaluate every rule, print timings and memory."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--minutes", type=float, default=0.0,
                    help="history to fill (default: the retention the rules need)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--probes", action="store_true",
                    help="also store every target's probe series (/health and canary "
                         "succeeding, every 15 s), as the daemon does with probes on")
    ap.add_argument("--parse-once", action="store_true",
                    help="parse each step's page once for every target (5,000 targets fill "
                         "in about a minute; the ingest figure is then storing alone)")
    ap.add_argument("--gc", choices=("held", "daemon", "python"), default="held",
                    help="the collector during evaluations: held off as in the daemon "
                         "(default), the daemon's thresholds only, or Python's defaults")
    ap.add_argument("--no-fused", action="store_true",
                    help="evaluate without the one-pass aggregations of range functions "
                         "(sentinel/promql/fused.py), to compare")
    args = ap.parse_args()
    fused.ENABLED = not args.no_fused
    groups = load_rule_files(RULES)
    rules = [r for g in groups for r in g.rules]
    reach = max(max_lookback_ms(r.query) for r in rules)
    minutes = args.minutes or (reach + 60_000) / 60_000
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    store = MemoryStore(retention_ms=int(minutes * 60_000))
    store.set_filter(needed_series(groups))
    shared = SharedSeries(store)
    targets = [TargetSeries(shared, f"t{i}", {"target": f"t{i}", "instance": f"127.0.0.1:{i}"})
               for i in range(args.targets)]
    probes = [ProbeTarget(f"t{i}", "http://127.0.0.1") for i in range(args.targets)]
    texts = pages(int(minutes * 12) + 1)
    t0 = time.process_time()
    now = 1_700_000_000_000
    for step, text in enumerate(texts):
        page = targets[0].parse(text, False) if args.parse_once else None
        for i, ts in enumerate(targets):
            t = now + step * 5000 + i % 5000
            ts.store_page(page or ts.parse(text, False), t)
            ts.report(t, True, 0.01, 1000)
            if args.probes and step % 3 == 0:
                for labels, value in samples_of(probes[i], PROBE_RESULTS):
                    store.add(labels, t, value)
    fill_s = time.process_time() - t0
    heap = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    at = now + (len(texts) - 1) * 5000 + 5000
    engine = Engine(store)
    if args.gc != "python":
        gcpolicy.tune()  # the daemon's thresholds, and its evaluation hold
    gc.collect()  # the fill's garbage is not the evaluation's
    best = float("inf")
    per_rule: dict[str, float] = {}
    per_group: dict[str, float] = {}
    for _ in range(args.rounds):
        t0 = time.process_time()
        with gcpolicy.evaluation_hold() if args.gc == "held" else nullcontext():
            for g in groups:
                g0 = time.process_time()
                for r in g.rules:
                    r0 = time.process_time()
                    engine.query(r.query, at)
                    per_rule[r.name] = min(per_rule.get(r.name, 1e9), time.process_time() - r0)
                per_group[g.name] = min(per_group.get(g.name, 1e9), time.process_time() - g0)
        best = min(best, time.process_time() - t0)
    print(f"{args.targets} targets, {minutes:.1f} min of history: {store.series_count()} series, "
          f"{store.sample_count()} samples, {store.sample_bytes() / 2**20:.1f} MiB of samples, "
          f"{heap / 2**20:.1f} MiB Python heap for store + parse cache "
          f"({heap / max(1, store.series_count()):.0f} B a series)")
    print(f"ingest: {1e6 * fill_s / (len(texts) * args.targets):.0f} µs CPU a scrape")
    print(f"one evaluation of all {len(rules)} rules: {best:.3f} CPU s (best of {args.rounds}, "
          f"collector: {args.gc}, fused: {'no' if args.no_fused else 'yes'})")
    print("per group (each must fit its 5 s interval with the CPU the daemon's main process "
          "has left after ingest):")
    for name, s in sorted(per_group.items(), key=lambda kv: -kv[1]):
        print(f"  {s:.3f} s  group {name}")
    print("slowest rules:")
    for name, s in sorted(per_rule.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {s:.3f} s  {name}")


if __name__ == "__main__":
    main()
