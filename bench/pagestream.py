"""Pages and notifications per failure: Sentinel against Prometheus + Alertmanager.

The same failures, at the same time, on the same simulated vLLM servers, watched
by Sentinel and by Prometheus stacks with the same shipped rules (rules/vllm.yaml,
rules/sentinel.yaml):

    crash-fixed    HBM OOM in the log; the XLA cache is warm: Sentinel's policy restarts
                   it through the simulator's Docker socket (Prometheus sees the same restart)
    crash-refused  the same crash with a cold cache: the policy refuses (allow_cold: false);
                   it stays down to the end (a person who brought it back would fill the
                   cache with a cold start, and Sentinel, the crash alert still firing,
                   would then restart it warm: another story)
    crash-down     the same crash on a server no policy covers: down and failing /health
                   for 2 min, then a person brings it back
    down           a server stops answering (no crash line) for 2 min
    sick-a, sick-b two overloaded servers for 8 min: KV cache 97 %, 8 requests waiting,
                   2.5 s to the first token, preemptions every second

Time is compressed: every `for` and range selector of rules/vllm.yaml is divided by
--scale (default 4) on both sides, and so are the failures' durations (2 min of down is
30 s). Four columns:

    Sentinel       what it ships: its route (everything to a `pager` webhook, grouped by
                   alertname and target, sent at once: group_wait 0s, group_interval 1s,
                   repeat_interval 4h), its inhibitions and, where this build has it,
                   act-first (`notify.act_first: {grace: 2m, receiver: chat}`)
    AM             Prometheus + Alertmanager with Sentinel's route and no inhibitions,
                   Prometheus reading Sentinel's evidence through a bridge (below)
    AM+inh         the same Prometheus, a second Alertmanager with Sentinel's shipped
                   inhibit rules copied in
    plain          what a new user of a plain Prometheus stack gets: a Prometheus of its
                   own with the same (scaled) rule files, scraping only the simulators'
                   /metrics (`up` and `vllm:*`), no bridge; an Alertmanager with its default
                   route, only the receiver set to a pager webhook. Alertmanager's defaults
                   are NOT time-compressed: one group for every alert (no group_by), sent
                   30 s after its first alert (group_wait), then at most every 5 min
                   (group_interval), repeated every 4 h; so in a run of a few minutes it
                   sends once or twice, and the rules that read Sentinel's evidence (the
                   crash signatures, the health probe) never fire there.

What the AM columns' Prometheus reads: the simulators' /metrics directly (as `up` and
`vllm:*`), and Sentinel's evidence, the series a Prometheus stack would get from mtail
and blackbox_exporter (`sentinel_log_signature_matches_total`, `sentinel_probe_success`,
`sentinel_probe_ttft_seconds`), from a bridge that serves Sentinel's instant-query
answers (/api/v1/query) as an exposition page; and Sentinel's own /metrics (for
rules/sentinel.yaml). So those stacks judge the same evidence as Sentinel.

Counted at the webhooks (sentinel/demo/tally.py): a page is a firing message in a new
group; an update, a firing message to a group already paged; resolved, a resolved
message; chat, a message to the chat receiver. Against what the bench knows (each
server's failure, polled from t0 every 0.1 s: down, failing /health, or sick):
a false resolve is a resolved message to the pager naming a server still failing; silent,
a server whose failure was open (on a server no restart policy covers, or not over
within act-first's 2-min grace) that no message to the pager named.

    python bench/pagestream.py [--scale 4] [--keep]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import yaml  # noqa: E402
from _alertmanager import Alertmanager  # noqa: E402
from fixtures_prometheus import Prometheus  # noqa: E402

from sentinel.config import load_config  # noqa: E402
from sentinel.config.notify import default_inhibit_rules  # noqa: E402
from sentinel.daemon.app import App  # noqa: E402
from sentinel.demo.config import (  # noqa: E402
    CHAT,
    PAGER,
    ROUTE_SETTINGS,
    DemoTarget,
    act_first_supported,
    write_demo_config,
)
from sentinel.demo.rules import scaled_rules, self_alerts  # noqa: E402
from sentinel.demo.sink import WebhookSink  # noqa: E402
from sentinel.demo.tally import (  # noqa: E402
    APART,
    OTHER,
    Counts,
    false_resolves,
    silent,
    table,
    tally,
)
from sentinel.paths import bundled_dir  # noqa: E402
from sentinel.sim.crashable import serve_docker, start_crashable  # noqa: E402
from sentinel.sim.server import SimServer, start_sim  # noqa: E402

POLL_S = 0.25
EVIDENCE = ("sentinel_log_signature_matches_total", "sentinel_probe_success",
            "sentinel_probe_ttft_seconds")
DOWN_S, SICK_S, CRASH_WINDOW_S = 120, 480, 300  # production seconds, divided by --scale
GRACE_S = 120  # act-first's grace in the demo config (2m, not scaled)
FAILURE_POLL_S = 0.1
# Alertmanager's default route: group_by none (one group), group_wait 30s, group_interval 5m,
# repeat_interval 4h; not scaled, as a new user gets them.
PLAIN_ROUTE = {"receiver": PAGER}
AM_GROUP_WAIT_S, AM_GROUP_INTERVAL_S = 30, 300
POLICY = ("crash-fixed", "crash-refused")  # the targets a restart policy covers
SCENARIOS = ("crash-fixed", "crash-refused", "crash-down", "down", "two sick servers")
SICK = {"kv_cache_usage": 0.97, "num_requests_waiting": 8, "num_requests_running": 16,
        "ttft_s": 2.5, "load_rps": 5}
WELL = {"kv_cache_usage": 0.42, "num_requests_waiting": 0, "num_requests_running": 3,
        "ttft_s": 0.0, "load_rps": 5}


class Bridge:
    """Serves Sentinel's evidence series (from its /api/v1/query) as a /metrics page.

    A thread asks Sentinel every POLL_S and keeps the page; a scrape gets the kept page at
    once (asking Sentinel inside the scrape took longer than Prometheus's scrape timeout
    on a loaded machine, and the bridge read as down).
    """

    def __init__(self, api: str) -> None:
        bridge = self
        self.api = api
        self.text = ""
        self._stop = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                body = bridge.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        threading.Thread(target=self._poll, daemon=True).start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def _poll(self) -> None:
        with httpx.Client(base_url=self.api, timeout=5) as http:
            while not self._stop.wait(POLL_S):
                try:
                    self.text = self.page(http)
                except (httpx.HTTPError, KeyError, ValueError) as exc:
                    print(f"bridge: {exc}", flush=True)

    @staticmethod
    def page(http: httpx.Client) -> str:
        """The exposition text of every evidence series Sentinel holds now."""
        lines = []
        for name in EVIDENCE:
            for sample in http.get("/api/v1/query", params={"query": name}).json()[
                    "data"]["result"]:
                labels = ",".join(f'{k}="{_escape(v)}"' for k, v in
                                  sorted(sample["metric"].items()) if k != "__name__")
                lines.append(f"{name}{{{labels}}} {sample['value'][1]}")
        return "\n".join(lines) + "\n"

    def stop(self) -> None:
        """Stop polling and serving."""
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a scrape Prometheus gave up on (loaded machine): its next one comes in 1 s


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Failures:
    """When each server was failing (down, failing /health, or sick), polled from start().

    Sentinel restarts crash-fixed when it chooses, so the bench reads the simulators'
    state rather than its own script; a span's end is late by at most FAILURE_POLL_S.
    """

    def __init__(self, servers: dict[str, SimServer]) -> None:
        self.servers = servers
        self.spans: dict[str, list[tuple[float, float | None]]] = {n: [] for n in servers}
        self._stop = threading.Event()

    def start(self) -> None:
        """Poll in a thread until stop()."""
        threading.Thread(target=self._poll, daemon=True).start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for name, server in self.servers.items():
                st, spans = server.state, self.spans[name]
                failing = st.down or not st.healthy or st.kv_cache_usage >= SICK["kv_cache_usage"]
                if failing and (not spans or spans[-1][1] is not None):
                    spans.append((now, None))
                elif not failing and spans and spans[-1][1] is None:
                    spans[-1] = (spans[-1][0], now)
            self._stop.wait(FAILURE_POLL_S)

    def stop(self) -> None:
        """Stop polling."""
        self._stop.set()

    def open_since(self) -> dict[str, float]:
        """Servers whose failure a person had to hear of → when it began: every failure on
        a server no restart policy covers; on one it covers, a failure not over within
        act-first's grace."""
        out = {}
        for name, spans in self.spans.items():
            for start, end in spans:
                if name not in POLICY or end is None or end - start > GRACE_S:
                    out[name] = start
                    break
        return out


def _alertmanager(folder: Path, hook: str, route: dict[str, Any], *, inhibit: bool
                  ) -> Alertmanager:
    """Alertmanager with the equivalent route; with `inhibit`, Sentinel's shipped
    inhibitions as they are (same matcher syntax)."""
    rules = [{"source_matchers": list(r.source_matchers),
              "target_matchers": list(r.target_matchers), "equal": list(r.equal)}
             for r in default_inhibit_rules()] if inhibit else None
    return Alertmanager(folder, hook, route, rules)


def _wait(predicate: Callable[[], object], timeout_s: float, what: str) -> None:
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        if predicate():
            return
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def _prometheus_config(prom: Prometheus, rules: list[Path], servers: dict[str, SimServer],
                       bridge: Bridge | None, sentinel: str | None, alertmanagers: list[str]
                       ) -> None:
    """Overwrite the fixture's config with ours (scrapes, rules, alertmanagers) before start;
    without `bridge` and `sentinel`, the simulators' /metrics only (the plain column)."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms",
                   "evaluation_interval": "1s"},
        "rule_files": [str(r) for r in rules],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": alertmanagers}]}]},
        "scrape_configs": [
            {"job_name": "vllm", "static_configs": [
                {"targets": [s.url.removeprefix("http://")],
                 "labels": {"target": name, "cluster": "demo"}} for name, s in servers.items()]},
        ],
    }
    if bridge is not None and sentinel is not None:
        config["scrape_configs"] += [
            {"job_name": "sentinel-evidence", "honor_labels": True,
             "static_configs": [{"targets": [bridge.address]}]},
            {"job_name": "sentinel", "scrape_interval": "2s", "scrape_timeout": "2s",
             "static_configs": [{"targets": [sentinel]}]}]
    (prom.work / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))


class Run:
    """One run: every scenario at once, watched by Sentinel and by Prometheus + Alertmanager."""

    def __init__(self, folder: Path, scale: int, route: dict[str, Any]) -> None:
        self.folder, self.scale, self.route = folder, scale, route
        self.sinks = {k: WebhookSink().start()
                      for k in ("s-pager", "s-chat", "am", "am-inh", "plain")}
        self.crashed = {name: start_crashable(folder, name, warm=name != "crash-refused")
                        for name in ("crash-fixed", "crash-refused", "crash-down")}
        self.plain = {name: start_sim() for name in ("down", "sick-a", "sick-b")}
        self.servers = {**{n: c.sim for n, c in self.crashed.items()}, **self.plain}
        self.model = start_sim()
        self.failures = Failures(self.servers)
        self.docker = serve_docker(str(folder / "docker.sock"), list(self.crashed.values()))
        self.stoppers: list[Callable[[], None]] = []

    def start(self) -> App:
        """Sentinel, the bridge, two Alertmanagers and their Prometheus, and the plain
        Prometheus + Alertmanager, all watching the servers."""
        rules = scaled_rules(self.folder / "vllm.yaml", self.scale)
        path = write_demo_config(
            self.folder, [DemoTarget(n, s.url, self.crashed[n].log if n in self.crashed else None)
                          for n, s in self.servers.items()],
            {PAGER: self.sinks["s-pager"].url, CHAT: self.sinks["s-chat"].url},
            model_url=self.model.url, docker_socket=str(self.folder / "docker.sock"),
            restart=list(POLICY), rules=rules,
            probe="{interval: 2s, timeout: 5s}", route=self.route)
        app = App(load_config(path))
        app.start()
        self.stoppers.append(lambda: app.stop(5))
        assert app.status is not None
        sentinel = ":".join(map(str, app.status.address))
        bridge = Bridge(f"http://{sentinel}")
        self.stoppers.append(bridge.stop)
        ams = [_alertmanager(self.folder / "am", self.sinks["am"].url, self.route,
                             inhibit=False),
               _alertmanager(self.folder / "am-inh", self.sinks["am-inh"].url, self.route,
                             inhibit=True)]
        self.stoppers += [am.stop for am in ams]
        (self.folder / "prom").mkdir()
        prom = Prometheus(self.folder / "prom", {})
        _prometheus_config(prom, [rules, bundled_dir("rules") / "sentinel.yaml"], self.servers,
                           bridge, sentinel, [am.address for am in ams])
        prom.start()
        self.stoppers.append(prom.stop)
        self._start_plain(rules)
        return app

    def _start_plain(self, rules: Path) -> None:
        """The plain column: Alertmanager's default route, a Prometheus without the bridge."""
        am = Alertmanager(self.folder / "am-plain", self.sinks["plain"].url, PLAIN_ROUTE)
        self.stoppers.append(am.stop)
        (self.folder / "prom-plain").mkdir()
        prom = Prometheus(self.folder / "prom-plain", {})
        _prometheus_config(prom, [rules, bundled_dir("rules") / "sentinel.yaml"], self.servers,
                           None, None, [am.address])
        prom.start()
        self.stoppers.append(prom.stop)

    def script(self, app: App, warm_up_s: float) -> float:
        """Warm up, then every failure at t0, and their ends on the scaled clock; returns t0."""
        for s in self.servers.values():
            s.set_state(**WELL)
        _wait(lambda: all(app.metrics.registry.get_sample_value(
            "sentinel_log_source_up", {"target": n, "source": f"file:{c.log}"}) == 1
            for n, c in self.crashed.items()), 60, "Sentinel to follow the logs")
        time.sleep(warm_up_s)  # both stacks hold some healthy history before the failures
        t0 = time.monotonic()
        say(t0, "failures begin")
        self.failures.start()
        self.stoppers.append(self.failures.stop)
        for c in self.crashed.values():
            c.crash()
        self.plain["down"].set_state(down=True)
        for name in ("sick-a", "sick-b"):
            self.plain[name].set_state(**SICK)
        back, well = t0 + DOWN_S / self.scale, t0 + SICK_S / self.scale
        end = max(well, back + CRASH_WINDOW_S / self.scale) + 30
        brought_back = healed = False
        while time.monotonic() < end:
            for name in ("sick-a", "sick-b"):
                if not healed:  # a preemption a second: VLLMPreemptionStorm
                    s = self.plain[name]
                    s.set_state(num_preemptions_total=s.state.num_preemptions_total + 1)
            if not brought_back and time.monotonic() >= back:
                say(t0, "a person brings back crash-down; down answers again")
                self.crashed["crash-down"].bring_back()
                self.plain["down"].set_state(down=False)
                brought_back = True
            if not healed and time.monotonic() >= well:
                say(t0, "the sick servers recover")
                for name in ("sick-a", "sick-b"):
                    self.plain[name].set_state(**WELL)
                healed = True
            time.sleep(1.0)
        say(t0, "done")
        return t0

    def stop(self) -> None:
        """Stop everything this run started, newest first."""
        for stop in reversed(self.stoppers):
            stop()
        self.docker.stop()
        for s in [*self.servers.values(), self.model]:
            s.stop()
        for sink in self.sinks.values():
            sink.stop()


def say(t0: float, text: str) -> None:
    """A line of progress, seconds after t0."""
    print(f"[{time.monotonic() - t0:6.1f}s] {text}", flush=True)


COLUMNS = (("Sentinel", "s-pager"), ("AM", "am"), ("AM+inh", "am-inh"), ("plain", "plain"))
SCENARIO_OF = {"crash-fixed": "crash-fixed", "crash-refused": "crash-refused",
               "crash-down": "crash-down", "down": "down", "sick-a": "two sick servers",
               "sick-b": "two sick servers"}


def report(run: Run, t0: float) -> None:
    """The table (per scenario and column), the failures as the bench saw them, and which
    alerts paged in each column."""
    own = self_alerts()
    spans, open_since = run.failures.spans, run.failures.open_since()
    rows: list[tuple[object, ...]] = []
    figures = {}
    for label, sink in COLUMNS:
        pager = run.sinks[sink].received
        chat = {CHAT: run.sinks["s-chat"].received} if sink == "s-pager" else {}
        figures[label] = (tally({PAGER: pager, **chat}, PAGER, SCENARIO_OF, own),
                          false_resolves(pager, spans, SCENARIO_OF, own),
                          silent(pager, open_since, SCENARIO_OF, own))
    for scenario in [*SCENARIOS, APART, OTHER]:
        for label, _ in COLUMNS:
            counts, wrong, quiet = figures[label]
            c = counts.get(scenario, Counts())
            scored = scenario not in (APART, OTHER)
            if scored or c != Counts():
                rows.append((scenario, label, c.pages, c.updates, c.resolved,
                             c.notifications if label == "Sentinel" else "-",
                             len(wrong.get(scenario, [])) if scored else "-",
                             quiet.get(scenario, 0) if scored else "-"))
    print()
    print("What reached people per scenario (Sentinel; AM = Prometheus + Alertmanager with "
          "Sentinel's route, reading Sentinel's evidence through the bridge; AM+inh = the "
          "same with Sentinel's inhibit rules; plain = Prometheus + Alertmanager's default "
          "route, no bridge):")
    print(table(("scenario", "column", "pages", "updates", "resolved", "chat",
                 "false resolve", "silent"), rows))
    print()
    print(f"{APART}: Sentinel's self-monitoring (rules/sentinel.yaml: {', '.join(sorted(own))}),"
          " which a loaded machine sets off.")
    _failures_seen(spans, open_since, t0)
    for label, (_, wrong, _) in figures.items():
        for scenario, times in sorted(wrong.items()):
            print(f"  false resolve  {label:<8} {scenario:<16} "
                  f"{', '.join(f'+{t - t0:.1f}s' for t in times)}")
    _plain_note(run.sinks["plain"], t0)
    print()
    print("What paged, and when (seconds after the failures began; self-monitoring left out):")
    for label, sink in COLUMNS:
        for scenario, pages in _paged(run.sinks[sink], SCENARIO_OF, t0, own):
            print(f"  {label:<8} {scenario:<16} {', '.join(pages)}")


def _failures_seen(spans: dict[str, list[tuple[float, float | None]]],
                   open_since: dict[str, float], t0: float) -> None:
    print("Failures as the bench saw them (false resolve: a resolved message naming a server "
          "inside a span; silent: an open one that no message to the pager named):")
    for name, found in spans.items():
        text = ", ".join(f"+{a - t0:.1f}-" + (f"+{b - t0:.1f} s" if b is not None else "end")
                         for a, b in found) or "none"
        print(f"  {name:<14} {text}{'' if name in open_since else ' (not open)'}")


def _plain_note(sink: WebhookSink, t0: float) -> None:
    times = [t - t0 for t, _, _ in sink.received]
    now = time.monotonic() - t0
    print(f"plain: Alertmanager's defaults, not time-compressed (group_wait {AM_GROUP_WAIT_S}s,"
          f" group_interval {AM_GROUP_INTERVAL_S // 60}m, repeat_interval 4h, one group for "
          "every alert): what a new user gets. It counts a page for each scenario the one "
          "group first names; a pager would open one incident for them all.")
    if times:
        print(f"  its messages at {', '.join(f'+{t:.1f}s' for t in times)}; the next could not "
              f"come before +{times[-1] + AM_GROUP_INTERVAL_S:.0f}s, this run ended at "
              f"+{now:.0f}s")
    else:
        print(f"  no message in this run (ended at +{now:.0f}s)")


def _paged(sink: WebhookSink, scenario_of: dict[str, str], t0: float, own: frozenset[str]
           ) -> list[tuple[str, list[str]]]:
    """Per scenario, `alertname +seconds` of every page (a firing message in a new group),
    but Sentinel's self-monitoring (`own`)."""
    groups: set[str] = set()
    out: dict[str, list[str]] = {}
    for t, body, _ in sink.received:
        if body.get("status") != "firing" or body.get("groupKey") in groups:
            continue
        groups.add(body.get("groupKey", ""))
        for a in body.get("alerts", []):
            if a["labels"].get("alertname") in own:
                continue
            scenario = scenario_of.get(a["labels"].get("target", ""), OTHER)
            status = "" if a.get("status", "firing") == "firing" else f" ({a['status']})"
            out.setdefault(scenario, []).append(
                f"{a['labels'].get('alertname', '?')} +{t - t0:.1f}s{status}")
    return sorted(out.items())


def main() -> None:
    """Run every scenario once through both stacks and print the figures."""
    # The figures are the output: the daemon's warnings (scrapes of the servers that are
    # down, on purpose) would bury them.
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=int, default=4,
                   help="divide the rules' `for`s and ranges and the failures' durations by this")
    p.add_argument("--warm-up", type=float, default=20.0,
                   help="seconds of healthy history before the failures")
    p.add_argument("--group-by", default="alertname,target",
                   help="group_by of Sentinel's and the AM columns' route (e.g. target); "
                        "the plain column keeps Alertmanager's default")
    p.add_argument("--keep", action="store_true", help="keep the working folder")
    args = p.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="snt-pages-"))  # short: a unix socket lives there
    print(f"pagestream: scale {args.scale}, act-first "
          f"{'on' if act_first_supported() else 'not in this build'}, folder {folder}")
    route = {**ROUTE_SETTINGS, "group_by": args.group_by.split(",")}
    run = Run(folder, args.scale, route)
    try:
        app = run.start()
        t0 = run.script(app, args.warm_up)
        time.sleep(3)  # the last resolved messages leave every stack
        run.failures.stop()
        report(run, t0)
    finally:
        run.stop()
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
