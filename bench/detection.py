"""Detection latency beyond `for`: Sentinel against Prometheus + Alertmanager, in pairs.

One loopback target serves `bench_trigger{trial="N"} 0` for N = 1..trials. A
trial flips one series to 1 at a random moment (its onset); the rule
`bench_trigger > 0` with `for: F` then fires, and the page reaches a loopback
webhook. What is measured is arrival - onset - F: the time the system added
beyond `for` (the wait for the next scrape, for the next evaluation, the
notification path).

Both sides run tuned alike: scrape and evaluation interval 1 s, a route that
groups by alertname and trial and sends at once (group_wait 0s,
group_interval 1s). Sentinel runs as `sentinel run` (a subprocess, this
checkout or --sentinel-root), with act-first on (`notify.act_first: {grace:
2m}`) and no remediation policy: BenchTrigger has none, so its page goes at
once, never held. Prometheus + Alertmanager are Debian's `prometheus` and
`prometheus-alertmanager` on loopback.

A pair is one run of each side, one after the other (the order alternates
pair by pair), each its own process started fresh; a run's figure is the
median of its trials. Each run names its target anew (Sentinel hashes a
target's scrape offset from its name; Prometheus from its labels, and the
target's port is new each run), so no side keeps one lucky or unlucky
phase between its scrape and its evaluation. The ratio of a pair is Sentinel's median over the
peer's; the summary is the median of the pairs' ratios ("bars"). The machine
is shared: the pairs are interleaved so that drifting load falls on both.

    python bench/detection.py [--pairs 5] [--trials 10] [--for 2]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from _alertmanager import Alertmanager, alertmanager_binary  # noqa: E402

from sentinel.daemon.scrapejobs import slot_offset_ms  # noqa: E402
from sentinel.demo.sink import WebhookSink  # noqa: E402

INTERVAL = "1s"
ALERT = "BenchTrigger"
ROUTE = ("{receiver: pager, group_by: [alertname, trial], group_wait: 0s, "
         "group_interval: 1s, repeat_interval: 4h}")


class Trigger:
    """The target: `bench_trigger{trial="N"}` for every trial, 0 until the trial's onset."""

    def __init__(self, trials: int, name: str) -> None:
        self.name = name  # Sentinel's target name: its scrape offset is hashed from it
        self.values = dict.fromkeys(range(1, trials + 1), 0)
        self.scrapes = 0
        self._lock = threading.Lock()
        trigger = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                body = trigger.page().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def page(self) -> str:
        """The exposition text now (and one more scrape counted)."""
        with self._lock:
            self.scrapes += 1
            lines = [f'bench_trigger{{trial="{n}"}} {v}' for n, v in self.values.items()]
        return "# TYPE bench_trigger gauge\n" + "\n".join(lines) + "\n"

    def set(self, trial: int, value: int) -> float:
        """Set one trial's value; returns the monotonic time from which scrapes see it."""
        with self._lock:
            self.values[trial] = value
            return time.monotonic()

    def reset(self) -> None:
        """Every trial back to 0, the scrape count to 0."""
        with self._lock:
            self.values = dict.fromkeys(self.values, 0)
            self.scrapes = 0

    def stop(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rules_yaml(for_s: float) -> str:
    """The one alerting rule, for both sides."""
    return (f"groups:\n  - name: bench\n    interval: {INTERVAL}\n    rules:\n"
            f"      - alert: {ALERT}\n        expr: bench_trigger > 0\n"
            f"        for: {for_s:g}s\n        labels: {{severity: page}}\n"
            "        annotations: {summary: 'trial {{ $labels.trial }}'}\n")


class Side:
    """One system under test: started fresh for a run, stopped after it."""

    name = ""

    def start(self, folder: Path, trigger: Trigger, rules: Path, hook: str) -> None:
        """Start the system watching `trigger`, paging `hook`."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop everything `start` started."""
        raise NotImplementedError


def _spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)


def _terminate(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


class SentinelSide(Side):
    """`sentinel run` from `root` (this checkout by default)."""

    name = "sentinel"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, folder: Path, trigger: Trigger, rules: Path, hook: str) -> None:
        """Write sentinel.yaml and start the daemon."""
        config = folder / "sentinel.yaml"
        config.write_text(
            f"database: sqlite:///{folder / 'sentinel.db'}\n"
            "listen: 127.0.0.1:0\n"
            f"rule_files: ['{rules}']\n"
            f"evaluation_interval: {INTERVAL}\n"
            "probe_interval: 0s\n"  # Prometheus probes nothing either
            "targets:\n"
            f"  - {{name: {trigger.name}, url: 'http://{trigger.address}', "
            f"scrape_interval: {INTERVAL}, scrape_timeout: 900ms}}\n"
            "receivers:\n"
            f"  - name: pager\n    webhook: {{url: '{hook}', timeout: 5s}}\n"
            "notify:\n"
            f"  route: {ROUTE}\n"
            # Act first is on; no remediation policy covers BenchTrigger, so it pages at once.
            "  act_first: {grace: 2m}\n")
        env = {**os.environ, "PYTHONPATH": str(self.root)}
        # In the root: `python -m` puts the working directory first on the path, so a
        # bench started in another checkout would run that one's Sentinel.
        self.proc = _spawn([sys.executable, "-m", "sentinel", "run", "-c", str(config),
                            "--log-level", "WARNING"], folder / "sentinel.log", env, self.root)

    def stop(self) -> None:
        """SIGTERM the daemon."""
        _terminate(self.proc)


class PrometheusSide(Side):
    """Debian's prometheus and prometheus-alertmanager on loopback."""

    name = "prometheus"

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.alertmanager: Alertmanager | None = None

    def start(self, folder: Path, trigger: Trigger, rules: Path, hook: str) -> None:
        """Alertmanager first (Prometheus sends to it), then Prometheus."""
        prom = shutil.which("prometheus")
        if prom is None or alertmanager_binary() is None:
            raise SystemExit("needs Debian's prometheus and prometheus-alertmanager")
        self.alertmanager = Alertmanager(folder / "am", hook, yaml.safe_load(ROUTE))
        am_addr = self.alertmanager.address
        (folder / "prometheus.yml").write_text(
            f"global: {{scrape_interval: {INTERVAL}, scrape_timeout: 900ms, "
            f"evaluation_interval: {INTERVAL}}}\n"
            f"rule_files: ['{rules}']\n"
            f"alerting: {{alertmanagers: [{{static_configs: [{{targets: ['{am_addr}']}}]}}]}}\n"
            "scrape_configs:\n"
            f"  - {{job_name: trigger, static_configs: [{{targets: ['{trigger.address}']}}]}}\n")
        self.procs.append(_spawn(
            [prom, f"--config.file={folder / 'prometheus.yml'}",
             f"--storage.tsdb.path={folder / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{free_port()}", "--log.level=warn"],
            folder / "prometheus.log"))

    def stop(self) -> None:
        """Prometheus, then Alertmanager."""
        for proc in reversed(self.procs):
            _terminate(proc)
        self.procs = []
        if self.alertmanager is not None:
            self.alertmanager.stop()
            self.alertmanager = None


def _wait(predicate: Callable[[], object], timeout_s: float, what: str) -> object:
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError(f"timed out waiting for {what}")


def _page_for(sink: WebhookSink, trial: int) -> float | None:
    """When the first firing message naming `trial` arrived, if one did."""
    for t, body, _ in list(sink.received):
        if body.get("status") == "firing" and any(
                a["labels"].get("trial") == str(trial) for a in body.get("alerts", [])):
            return t
    return None


def target_name(rng: random.Random, slot_offset: int | None) -> str:
    """A new target name a run; with `slot_offset`, one Sentinel scrapes that many ms into
    each 1 s interval (its hashed slot)."""
    while True:
        name = f"trigger-{rng.randrange(10**6)}"
        if slot_offset is None or slot_offset_ms(name, 1000) == slot_offset:
            return name


def run(side: Side, trials: int, for_s: float, rng: random.Random,
        slot_offset: int | None = None) -> list[float]:
    """One fresh run of `side`: its latencies beyond `for`, one a trial (seconds)."""
    folder = Path(tempfile.mkdtemp(prefix=f"snt-detect-{side.name}-"))
    rules = folder / "rules.yaml"
    rules.write_text(rules_yaml(for_s))
    # A new name a run, as Prometheus's target (a new port) gets a new offset a run.
    trigger, sink = Trigger(trials, target_name(rng, slot_offset)), WebhookSink().start()
    out: list[float] = []
    try:
        side.start(folder, trigger, rules, sink.url)
        _wait(lambda: trigger.scrapes >= 3, 60, f"{side.name} to scrape the trigger")
        time.sleep(3)  # the first evaluations run; both sides hold some history
        for trial in range(1, trials + 1):
            time.sleep(rng.uniform(0.5, 1.5))  # a random phase against both intervals
            onset = trigger.set(trial, 1)
            try:
                arrived = _wait(lambda t=trial: _page_for(sink, t), for_s + 30,
                                f"{side.name}'s page for trial {trial}")
            except TimeoutError as exc:
                print(f"  {side.name}: {exc}", flush=True)
                continue
            assert isinstance(arrived, float)
            out.append(arrived - onset - for_s)
            trigger.set(trial, 0)
    finally:
        side.stop()
        trigger.stop()
        sink.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return out


def _fmt(values: list[float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def main() -> None:
    """Run the pairs and print each run's trials, each pair's ratio and the median ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--trials", type=int, default=10, help="onsets per run")
    ap.add_argument("--for", dest="for_s", type=float, default=2.0, help="the rule's `for`, s")
    ap.add_argument("--sentinel-root", type=Path, default=ROOT,
                    help="the Sentinel checkout to run (for comparing revisions)")
    ap.add_argument("--only", choices=("sentinel", "prometheus"),
                    help="run one side only (no ratios)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--slot-offset", type=int, choices=(0, 250, 500, 750),
                    help="name Sentinel's target so that it is scraped this many ms into each "
                         "interval (shows what the phase of the scrape costs)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    sentinel, peer = SentinelSide(args.sentinel_root), PrometheusSide()
    print(f"detection beyond `for` ({args.for_s:g}s), scrape and evaluation every {INTERVAL}, "
          f"{args.trials} onsets a run; Sentinel from {args.sentinel_root} with act-first on "
          "and no remediation policy (pages at once); Alertmanager group_wait 0s", flush=True)
    ratios: list[float] = []
    for i in range(args.pairs):
        sides: list[Side] = [sentinel, peer] if i % 2 == 0 else [peer, sentinel]
        if args.only:
            sides = [s for s in sides if s.name == args.only]
        medians: dict[str, float] = {}
        for side in sides:
            lat = run(side, args.trials, args.for_s, rng, args.slot_offset)
            medians[side.name] = statistics.median(lat) if lat else float("nan")
            print(f"  pair {i + 1} {side.name:<10} median {medians[side.name]:.2f}s  "
                  f"[{_fmt(lat)}]", flush=True)
        if len(medians) == 2:
            ratio = medians["sentinel"] / medians["prometheus"]
            ratios.append(ratio)
            print(f"pair {i + 1}: Sentinel {medians['sentinel']:.2f}s, Prometheus + "
                  f"Alertmanager {medians['prometheus']:.2f}s, ratio {ratio:.2f}", flush=True)
    if ratios:
        print(f"median ratio over {len(ratios)} pairs: {statistics.median(ratios):.2f} "
              f"(pairs: {_fmt(ratios)})")


if __name__ == "__main__":
    main()
