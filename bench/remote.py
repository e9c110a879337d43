"""Remote-backend bench: Prometheus scrapes the fleet, Sentinel evaluates the shipped rules on it.

Run: `python bench/remote.py --targets 5000 --seconds 60` (unattended; needs `prometheus`).

The fleet is bench/fleet.py's helper process (N loopback vLLM /metrics pages,
their serving endpoints for the probes). Prometheus scrapes every target each
5 s (label `target` = the target's name, as Sentinel names it) and evaluates
nothing; `sentinel run` has `query_backend:` on that Prometheus, the shipped
rule files (rules/vllm.yaml, rules/sentinel.yaml) at a 5 s evaluation
interval, and the same targets for its probes (15 s, `--no-probes` to turn
them off). Sentinel does not scrape (the backend's Prometheus does).

Once every target has been scraped and every group evaluated once, for
`--seconds`, Sentinel's /metrics is read every second. Printed:

- per rule group: evaluations done vs expected, evaluations on time (the
  missed-iterations counter did not move and the evaluation took less than
  the interval), the missed and overrun counters, and the durations of the
  window's evaluations (each read once from
  `sentinel_rule_group_last_duration_seconds` when the group's evaluation
  counter moved): median, 95th percentile, max; and its rules that failed
  (`sentinel_rule_evaluation_failures_total`: a query that failed or ran past
  its deadline, 0.8 of the interval);
- the queries Sentinel sent the backend, their errors and mean latency;
- CPU seconds per second and RSS of Sentinel and of Prometheus, and the
  scrapes Prometheus did vs expected (counted by the targets).
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from fleet import (  # noqa: E402
    RULE_FILES,
    FleetProcess,
    _prepare,
    _raise_fd_limit,
    _wait,
    cpu_s,
    free_port,
    metrics,
    rss_mb,
    total,
)

from sentinel.rules.loader import load_rule_files  # noqa: E402

INTERVAL_S = 5


def prometheus_config(work: Path, ports: list[int], listen: int) -> list[str]:
    """Prometheus scraping the fleet, each target labelled as Sentinel names it; no rules."""
    statics = "".join(f"      - {{targets: ['127.0.0.1:{p}'], labels: {{target: t{i}}}}}\n"
                      for i, p in enumerate(ports))
    (work / "prometheus.yml").write_text(
        f"global: {{scrape_interval: {INTERVAL_S}s, scrape_timeout: 4s}}\n"
        "scrape_configs:\n  - job_name: vllm\n    static_configs:\n" + statics)
    return ["prometheus", f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{listen}",
            "--log.level=warn"]


def sentinel_config(work: Path, ports: list[int], listen: int, backend: str,
                    probes: bool) -> list[str]:
    """`sentinel run` with the shipped rules against `backend`; the targets for the probes."""
    lines = [f"database: sqlite:///{work / 'sentinel.db'}", f"listen: 127.0.0.1:{listen}",
             "rule_files: [" + ", ".join(str(p) for p in RULE_FILES if p.exists()) + "]",
             f"evaluation_interval: {INTERVAL_S}s", f"scrape_interval: {INTERVAL_S}s",
             "scrape_timeout: 4s", f"query_backend: {{url: '{backend}'}}",
             *([] if probes else ["probe_interval: 0s"]), "targets:"]
    lines += [f"  - {{name: t{i}, url: 'http://127.0.0.1:{p}'}}" for i, p in enumerate(ports)]
    (work / "sentinel.yaml").write_text("\n".join(lines) + "\n")
    return [sys.executable, "-m", "sentinel", "run", "-c", str(work / "sentinel.yaml")]


@dataclass
class Group:
    """One rule group's evaluations in the window."""

    name: str
    done: float = 0
    missed: float = 0
    overruns: float = 0
    durations: list[float] = field(default_factory=list)


def _group_of(series: str) -> str:
    return series.split('group="', 1)[1].split('"', 1)[0]


def _per_group(m: dict[str, float], name: str) -> dict[str, float]:
    return {_group_of(k): v for k, v in m.items() if k.startswith(name + "{")}


def watch(listen: int, seconds: float) -> tuple[dict[str, Group], dict[str, float],
                                               dict[str, float], float]:
    """Read Sentinel's /metrics every second for `seconds`: (groups, first, last, window)."""
    evals = "sentinel_rule_group_evaluations_total"
    first = last = metrics(listen)
    seen = _per_group(first, evals)
    groups = {g: Group(g) for g in seen}
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        time.sleep(1)
        last = metrics(listen)
        now = _per_group(last, evals)
        durations = _per_group(last, "sentinel_rule_group_last_duration_seconds")
        for g, n in now.items():
            if n > seen.get(g, 0) and g in durations:
                groups.setdefault(g, Group(g)).durations.append(durations[g])
        seen = now
    window = time.monotonic() - t0
    for g, grp in groups.items():
        grp.done = _per_group(last, evals).get(g, 0) - _per_group(first, evals).get(g, 0)
        for attr, name in (("missed", "sentinel_rule_group_iterations_missed_total"),
                           ("overruns", "sentinel_rule_group_overruns_total")):
            setattr(grp, attr, _per_group(last, name).get(g, 0)
                    - _per_group(first, name).get(g, 0))
    return groups, first, last, window


def run(targets: int, seconds: float, probes: bool, work: Path) -> None:
    """Start the fleet, Prometheus and Sentinel; measure; print the report."""
    # 2,500 targets a helper: with the probes' ~2 sockets a target beside Prometheus's
    # scrapes, one helper would pass a hard descriptor limit of 20,000.
    fleet = FleetProcess(targets, per_helper=2500)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        prom_port, listen = free_port(), free_port()
        backend = f"http://127.0.0.1:{prom_port}"
        prom_log = open(work / "prometheus.log", "w")  # noqa: SIM115 (closed with the run)
        prom = subprocess.Popen(prometheus_config(work, fleet.ports, prom_port),
                                stdout=prom_log, stderr=subprocess.STDOUT,
                                preexec_fn=functools.partial(_prepare, None))
        procs.append(prom)
        if not _wait(lambda: fleet.counts()["hit"] >= targets or prom.poll() is not None, 300):
            raise SystemExit("Prometheus never scraped every target; see prometheus.log")
        print(f"Prometheus scraped all {targets} targets", flush=True)
        log = open(work / "sentinel.log", "w")  # noqa: SIM115
        sentinel = subprocess.Popen(sentinel_config(work, fleet.ports, listen, backend, probes),
                                    stdout=log, stderr=subprocess.STDOUT,
                                    preexec_fn=functools.partial(_prepare, None))
        procs.append(sentinel)

        def evaluated_once() -> bool:
            if sentinel.poll() is not None:
                return True
            try:
                evals = _per_group(metrics(listen), "sentinel_rule_group_evaluations_total")
            except OSError:
                return False
            return bool(evals) and all(v >= 1 for v in evals.values())

        if not _wait(evaluated_once, 300) or sentinel.poll() is not None:
            raise SystemExit(f"Sentinel exited or never evaluated every group; see {log.name}")
        time.sleep(INTERVAL_S)  # past start-up: every group on its schedule
        f0, s0, p0 = fleet.counts(), cpu_s(sentinel.pid), cpu_s(prom.pid)
        h0 = sum(map(cpu_s, fleet.pids))
        groups, m0, m1, window = watch(listen, seconds)
        f1, s1, p1 = fleet.counts(), cpu_s(sentinel.pid), cpu_s(prom.pid)
        helper = (sum(map(cpu_s, fleet.pids)) - h0) / window
        report(targets, probes, groups, m0, m1, window,
               (s1 - s0) / window, (p1 - p0) / window, rss_mb(sentinel.pid), rss_mb(prom.pid),
               f1["total"] - f0["total"], log.name)
        # A helper near 1.0 serves as fast as it can: missed scrapes are then the fleet's.
        print(f"fleet helper: {helper:.3f} CPU-s/s; load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs")
        sentinel.send_signal(signal.SIGTERM)
        sentinel.wait(30)
        slowest = max(groups.values(), key=lambda g: statistics.median(g.durations or [0]))
        alone(backend, slowest.name)
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        fleet.stop()


def alone(backend: str, group: str) -> None:
    """Each rule of `group` queried once, one at a time, with Sentinel stopped: how long
    the backend itself takes, against the query deadline (0.8 of the interval)."""
    rules = [r for g in load_rule_files([str(p) for p in RULE_FILES if p.exists()])
             if g.name == group for r in g.rules]
    print(f"{group}'s queries alone, Sentinel stopped (deadline {0.8 * INTERVAL_S:g} s):")
    for rule in rules:
        began = time.monotonic()
        try:
            httpx.post(f"{backend}/api/v1/query", data={"query": rule.expr, "timeout": "60s"},
                       timeout=65).raise_for_status()
            outcome = ""
        except httpx.HTTPError as e:
            outcome = f" ({type(e).__name__})"
        print(f"  {rule.name:32} {time.monotonic() - began:6.3f} s{outcome}")


def report(targets: int, probes: bool, groups: dict[str, Group], m0: dict[str, float],
           m1: dict[str, float], window: float, sentinel_cpu: float, prom_cpu: float,
           sentinel_rss: float, prom_rss: float, scrapes: int, log: str) -> None:
    """Print the per-group table and the totals (see the module docstring)."""
    expected = window / INTERVAL_S
    print(f"\n== remote backend: {targets} targets, {window:.0f} s window, "
          f"{INTERVAL_S} s intervals, probes {'on' if probes else 'off'}")
    print(f"{'group':24} {'evals':>9} {'on time':>8} {'missed':>6} {'overrun':>7} "
          f"{'median s':>8} {'p95 s':>6} {'max s':>6} {'rules failed':>12}")
    name = "sentinel_rule_evaluation_failures_total"  # a rule's query ran out or failed
    before, after = _per_group(m0, name), _per_group(m1, name)
    on_time_all = done_all = 0.0
    for g in sorted(groups.values(), key=lambda g: g.name):
        d = sorted(g.durations)
        # Missed iterations never ran (not in `d`); of those that ran, the overlong are late.
        late = sum(1 for x in d if x >= INTERVAL_S)
        on_time = len(d) - late
        on_time_all += on_time
        done_all += len(d) + g.missed
        p95 = d[min(len(d) - 1, int(0.95 * len(d)))] if d else float("nan")
        print(f"{g.name:24} {g.done:4g}/{expected:<4.0f} {on_time:4g}/{len(d) + g.missed:<3g} "
              f"{g.missed:6g} {g.overruns:7g} "
              f"{statistics.median(d) if d else float('nan'):8.3f} {p95:6.3f} "
              f"{max(d) if d else float('nan'):6.3f} "
              f"{after.get(g.name, 0) - before.get(g.name, 0):12g}")
    print(f"evaluations on time: {on_time_all:g} of {done_all:g} "
          f"({100 * on_time_all / max(1, done_all):.1f} %)")
    q = total(m1, "sentinel_query_backend_queries_total") - total(
        m0, "sentinel_query_backend_queries_total")
    errs = total(m1, "sentinel_query_backend_errors_total") - total(
        m0, "sentinel_query_backend_errors_total")
    secs = total(m1, "sentinel_query_backend_duration_seconds_sum") - total(
        m0, "sentinel_query_backend_duration_seconds_sum")
    reasons = {k.split('reason="', 1)[1].split('"', 1)[0]: v - m0.get(k, 0)
               for k, v in m1.items() if k.startswith("sentinel_query_backend_errors_total{")}
    print(f"backend queries: {q:g} ({q / window:.1f}/s), errors {errs:g} "
          f"{ {k: v for k, v in reasons.items() if v} }, mean {1000 * secs / max(1, q):.0f} ms")
    print(f"Sentinel: {sentinel_cpu:.3f} CPU-s/s, RSS {sentinel_rss:.0f} MB; "
          f"Prometheus: {prom_cpu:.3f} CPU-s/s, RSS {prom_rss:.0f} MB")
    print(f"Prometheus scrapes: {scrapes} of {round(targets * window / INTERVAL_S)} expected "
          f"({100 * scrapes / max(1, targets * window / INTERVAL_S):.1f} %)")
    print(f"Sentinel's log: {log}")


def main() -> None:
    """Parse arguments and run once."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=60.0, help="measurement window")
    ap.add_argument("--no-probes", action="store_true", help="Sentinel without probes")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = ap.parse_args()
    if not shutil.which("prometheus"):
        raise SystemExit("prometheus is not installed (apt-get install prometheus)")
    _raise_fd_limit()
    work = Path(tempfile.mkdtemp(prefix="remote-bench-"))
    try:
        run(args.targets, args.seconds, not args.no_probes, work)
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
