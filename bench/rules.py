"""Rule-evaluation benchmark: a 200-rule pack with recording rules over 1,000 targets' series.

Run: `python bench/rules.py [--targets 1000] [--repeat 3] [--no-prometheus]`.

The series are the vLLM metrics rule packs read most (gauges, token and
request counters, three latency histograms: ~85 series a target), taken from
tests/data/vllm_metrics.txt with a `target` label per target, sampled every
5s over `--window` seconds. The pack (written to a temp file, and printed with
--print-rules) has 100 recording rules (per-target rates, ratios and
quantiles, then fleet aggregations that read the recorded series) and 100
alerting rules on recorded series, in 10 groups.

Sentinel: the series go into a MemoryStore, then one full evaluation (every
group, in order, results written back) is timed, `--repeat` times.

Prometheus (when /usr/bin/prometheus exists): it scrapes the same series
from a loopback HTTP endpoint every 5s for `--window` seconds and evaluates
the same rule file every 5s; the benchmark reads its
prometheus_rule_group_last_duration_seconds for each group. Prometheus runs
groups concurrently, so both its sum over groups and its slowest group are
reported beside Sentinel's sequential full evaluation.
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import yaml

from sentinel.promql import Engine
from sentinel.promql.series_notation import parse_series
from sentinel.rules.loader import load_rule_files
from sentinel.rules.manager import RuleManager
from sentinel.store.memory import MemoryStore

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm_metrics.txt"
FAMILIES = re.compile(
    r"^vllm:(num_requests_running|num_requests_waiting|kv_cache_usage_perc|prompt_tokens_total|"
    r"generation_tokens_total|request_success_total|num_preemptions_total|"
    r"prefix_cache_queries_total|prefix_cache_hits_total|"
    r"(time_to_first_token_seconds|e2e_request_latency_seconds|inter_token_latency_seconds)"
    r"_(bucket|sum|count))\{")
STEP_S = 5
HISTOGRAMS = ("time_to_first_token_seconds", "e2e_request_latency_seconds",
              "inter_token_latency_seconds")
COUNTERS = ("prompt_tokens_total", "generation_tokens_total", "num_preemptions_total",
            "prefix_cache_queries_total", "prefix_cache_hits_total", "request_success_total")


def base_series() -> list[tuple[str, float, bool]]:
    """(series text, value, is_counter) of one target's page."""
    out = []
    for line in FIXTURE.read_text().splitlines():
        if FAMILIES.match(line):
            text, value = line.rsplit(" ", 1)
            counter = not any(g in text for g in ("running", "waiting", "kv_cache"))
            out.append((text, float(value), counter))
    return out


def page(series: list[tuple[str, float, bool]], targets: int, t_s: float) -> list[str]:
    """Exposition lines of every target at time t_s: counters grow, gauges wander."""
    lines = []
    for i in range(targets):
        scale = 1 + (i % 97) / 97
        for text, value, counter in series:
            v = value * scale + (t_s * scale * (1 + value % 7) if counter else (i * t_s) % 3)
            lines.append(f'{text[:-1]},target="t{i:04d}"}} {v}')
    return lines


def rule_pack() -> dict:
    """200 rules: 100 recording, 100 alerting, 10 groups; later groups read recorded series."""
    groups: list[dict] = []
    rec: list[dict] = []
    for c in COUNTERS:
        rec.append({"record": f"target:vllm_{c}:rate1m",
                    "expr": f"sum by (target, model_name) (rate(vllm:{c}[1m]))"})
        rec.append({"record": f"target:vllm_{c}:increase1m",
                    "expr": f"sum by (target) (increase(vllm:{c}[1m]))"})
    for h in HISTOGRAMS:
        for q in ("0.5", "0.9", "0.95", "0.99"):
            rec.append({"record": f"target:vllm_{h}:p{q[2:]}",
                        "expr": f"histogram_quantile({q}, sum by (target, le) "
                                f"(rate(vllm:{h}_bucket[1m])))"})
        rec.append({"record": f"target:vllm_{h}:mean1m",
                    "expr": f"sum by (target) (rate(vllm:{h}_sum[1m])) / "
                            f"sum by (target) (rate(vllm:{h}_count[1m]))"})
    for g in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        for fn in ("max_over_time", "avg_over_time", "min_over_time"):
            rec.append({"record": f"target:vllm_{g}:{fn}1m",
                        "expr": f"max by (target) ({fn}(vllm:{g}[1m]))"})
    rec.append({"record": "target:vllm_prefix_cache:hit_ratio",
                "expr": "target:vllm_prefix_cache_hits_total:rate1m / "
                        "target:vllm_prefix_cache_queries_total:rate1m"})
    groups.append({"name": "vllm-target-records", "rules": rec})
    names = [r["record"] for r in rec]
    fleet = []
    for name in names:
        if len(fleet) + len(rec) >= 100:
            break
        short = name.split(":", 1)[1]
        fleet.append({"record": f"fleet:{short}:avg", "expr": f"avg({name})"})
        if len(fleet) + len(rec) < 100:
            fleet.append({"record": f"fleet:{short}:max", "expr": f"max({name})"})
    groups.append({"name": "vllm-fleet-records", "rules": fleet})
    alerts = []
    for i, name in enumerate(names * 3):
        if len(alerts) == 100:
            break
        # Most alerts stay quiet, as in a healthy fleet; every tenth fires for one target.
        expr = f'{name}{{target="t0007"}} >= 0' if i % 10 == 0 else f"{name} > {1e9 * (1 + i % 5)}"
        alerts.append({"alert": f"Vllm{i:03d}" + re.sub(r"\W", "", name.title())[:40],
                       "expr": expr, "for": f"{i % 4}m",
                       "labels": {"severity": "page" if i % 3 else "ticket"},
                       "annotations": {"summary": "{{ $labels.target }}: {{ $value }}"}})
    for k in range(8):
        groups.append({"name": f"vllm-alerts-{k}", "rules": alerts[k * 13:(k + 1) * 13]})
    assert sum(len(g["rules"]) for g in groups) == 200, sum(len(g["rules"]) for g in groups)
    return {"groups": groups}


def run_sentinel(rule_file: Path, series: list, targets: int, window_s: int, repeat: int
                 ) -> tuple[int, list[float], int]:
    store = MemoryStore(retention_ms=(window_s + 600) * 1000, max_series=10_000_000)
    refs: dict[str, int] = {}
    for t in range(0, window_s + 1, STEP_S):
        for line in page(series, targets, t):
            text, value = line.rsplit(" ", 1)
            ref = refs.get(text)
            if ref is None:
                ref = refs[text] = store.ref(parse_series(text))
            store.append(ref, t * 1000, float(value))
    engine = Engine(store, subquery_step_ms=STEP_S * 1000)
    manager = RuleManager(load_rule_files([str(rule_file)]), engine, store=store)
    times = []
    for k in range(repeat):
        now = (window_s + k * STEP_S) * 1000
        start = time.perf_counter()
        for name in manager.groups:
            manager.evaluate_group(name, now)
        times.append(time.perf_counter() - start)
    bad = [r for r in manager.rule_health() if r.last_error]
    assert not bad, bad[:3]
    return store.series_count(), times, len(manager.active_alerts())


class _Exporter(BaseHTTPRequestHandler):
    series: list = []
    targets = 0
    started = 0.0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = ("\n".join(page(self.series, self.targets, time.time() - self.started))
                + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_prometheus(binary: str, rule_file: Path, series: list, targets: int, window_s: int,
                   folder: Path) -> dict[str, float]:
    _Exporter.series, _Exporter.targets, _Exporter.started = series, targets, time.time()
    exporter = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    port = _free_port()
    config = folder / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": f"{STEP_S}s", "evaluation_interval": f"{STEP_S}s",
                   "scrape_timeout": f"{STEP_S}s"},
        "rule_files": [str(rule_file)],
        "scrape_configs": [{"job_name": "vllm", "honor_labels": True,
                            "static_configs": [{"targets": [
                                f"127.0.0.1:{exporter.server_address[1]}"]}]}],
    }))
    proc = subprocess.Popen([binary, f"--config.file={config}",
                             f"--web.listen-address=127.0.0.1:{port}",
                             f"--storage.tsdb.path={folder / 'data'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out: dict[str, float] = {}
    try:
        time.sleep(window_s)
        for _ in range(3):  # the best of three evaluations of each group: the machine is noisy
            time.sleep(2 * STEP_S)
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            for line in text.splitlines():
                if line.startswith("prometheus_rule_group_last_duration_seconds{"):
                    group = line.split('rule_group="', 1)[1].split('"', 1)[0].rsplit(";", 1)[1]
                    value = float(line.rsplit(" ", 1)[1])
                    out[group] = min(out.get(group, value), value)
    finally:
        proc.terminate()
        proc.wait(30)
        exporter.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--window", type=int, default=60, help="seconds of data before evaluating")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-prometheus", action="store_true")
    ap.add_argument("--print-rules", action="store_true")
    args = ap.parse_args()
    pack = rule_pack()
    if args.print_rules:
        print(yaml.safe_dump(pack, sort_keys=False))
        return
    series = base_series()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rule_file = folder / "rules.yaml"
        rule_file.write_text(yaml.safe_dump(pack, sort_keys=False))
        n, times, alerts = run_sentinel(rule_file, series, args.targets, args.window, args.repeat)
        best = min(times)
        print(f"series: {n} ({len(series)} a target x {args.targets} targets, plus recorded), "
              f"{args.window // STEP_S + 1} samples each; rules: 200 in 10 groups; "
              f"active alerts: {alerts}")
        print("sentinel full evaluation (s): " + ", ".join(f"{t:.3f}" for t in times)
              + f"  best {best:.3f}")
        binary = shutil.which("prometheus")
        if args.no_prometheus or binary is None:
            print("prometheus: not run" + ("" if args.no_prometheus else " (not installed)"))
            return
        durations = run_prometheus(binary, rule_file, series, args.targets, args.window, folder)
        if not durations:
            print("prometheus: no prometheus_rule_group_last_duration_seconds (did it start?)")
            return
        total, slowest = sum(durations.values()), max(durations.values())
        print(f"prometheus 2.42 rule_group_last_duration_seconds: sum {total:.3f}s over "
              f"{len(durations)} groups, slowest group {slowest:.3f}s")
        print(f"ratio sentinel/prometheus: {best / total:.1f}x the sum, "
              f"{best / slowest:.1f}x the slowest group")


if __name__ == "__main__":
    main()
