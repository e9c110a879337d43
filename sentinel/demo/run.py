"""Running the demo: servers, receivers and the daemon up; failures in; what happened out.

Everything runs in this process on free loopback ports: the simulators, a
Docker socket for the two that crash, a model simulator, two webhook
receivers (`pager`, `chat`) and the daemon on its embedded defaults (SQLite
in a temporary folder). The demo prints each change of alert, incident and
message as it happens, every incident's record, and last a table of what
each scenario sent to people, counted at the receivers.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.demo import scenarios as sc
from sentinel.demo.config import (
    CHAT,
    CRASH_ALERT,
    PAGER,
    STALL_SCALE,
    DemoTarget,
    act_first_supported,
    write_demo_config,
)
from sentinel.demo.rules import self_alerts
from sentinel.demo.sink import WebhookSink
from sentinel.demo.tally import APART, OTHER, Counts, table, tally
from sentinel.incidents import queries
from sentinel.respond.notify.depth import outbox_depth
from sentinel.sim.crashable import Crashable, serve_docker, start_crashable
from sentinel.sim.server import start_sim

DEADLINE_S = 58.0
WARM_UP_S = 3.0  # healthy traffic before the failures
QUIET_S = 2.0  # after the last scenario ended: nothing queued or received for this long
TARGETS = {sc.BACKLOG: "demo-gemma", sc.STALL: "demo-gemma-stall",
           sc.CRASH_FIXED: "demo-gemma-crash", sc.CRASH_REFUSED: "demo-gemma-cold"}
TITLES = {sc.BACKLOG: "queue backlog", sc.STALL: "engine stall",
          sc.CRASH_FIXED: "crash, warm cache", sc.CRASH_REFUSED: "crash, cold cache"}
ALERTS = {sc.BACKLOG: "VLLMRequestsQueued", sc.STALL: "VLLMEngineStalled",
          sc.CRASH_FIXED: CRASH_ALERT, sc.CRASH_REFUSED: CRASH_ALERT}
# The columns of the closing table, counted at the receivers (see tally.py).
HEADER = ("scenario", "target", "pages", "page updates", "resolved (pager)",
          "notifications (chat)", "incident")


class Demo:
    """One run of the demo in `folder`; `sinks` and `counts` stay readable after `run()`."""

    def __init__(self, folder: Path, only: Collection[str] = sc.ALL,
                 deadline_s: float = DEADLINE_S) -> None:
        self.folder = folder
        self.keys = [k for k in sc.ALL if k in only]
        self.deadline_s = deadline_s
        self.sinks = {PAGER: WebhookSink(), CHAT: WebhookSink()}
        self.counts: dict[str, Counts] = {}
        self.scenarios: list[sc.Scenario] = []
        self._stoppers: list[Any] = []
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        """A line of the demo's log, with the seconds since it started."""
        print(f"[{time.monotonic() - self.started:5.1f}s] {text}", flush=True)

    def run(self) -> int:
        """Run the scenarios; 0 when every one reached its end in time, else 1."""
        try:
            app = self._start()
            self._stoppers.append(lambda: app.stop(2.0))
            self._introduce(app)
            ok = self._watch(app) and self._drain(app)
            self.counts = self._tally()
            self._print_details(app)
            self._print_end(ok)
            return 0 if ok else 1
        finally:
            for stop in reversed(self._stoppers):
                stop()

    # -- set-up ------------------------------------------------------------------

    def _start(self) -> App:
        for sink in self.sinks.values():
            sink.start()
            self._stoppers.append(sink.stop)
        crashables: list[Crashable] = []
        for key in self.keys:
            target, crashable = TARGETS[key], None
            if key in (sc.CRASH_FIXED, sc.CRASH_REFUSED):
                crashable = start_crashable(self.folder, target, warm=key == sc.CRASH_FIXED)
                crashables.append(crashable)
                sim = crashable.sim
            else:
                sim = start_sim()
            self._stoppers.append(sim.stop)
            self.scenarios.append(sc.Scenario(key, TITLES[key], target, ALERTS[key], sim,
                                              crashable))
        model = start_sim() if crashables else None
        socket = str(self.folder / "docker.sock") if crashables else None
        if model is not None and socket is not None:
            self._stoppers += [model.stop, serve_docker(socket, crashables).stop]
        path = write_demo_config(
            self.folder,
            [DemoTarget(s.target, s.sim.url, s.crashable.log if s.crashable else None)
             for s in self.scenarios],
            {name: sink.url for name, sink in self.sinks.items()},
            model_url=model.url if model else None, docker_socket=socket,
            restart=[c.name for c in crashables])
        app = App(load_config(path))
        app.start()
        self.started = time.monotonic()  # the clock of the failures, after start-up
        return app

    def _introduce(self, app: App) -> None:
        assert app.status is not None
        print("Sentinel demo: failures on simulated vLLM servers, detected, fixed where a "
              "policy allows, told to people once.")
        for s in self.scenarios:
            print(f"  {s.title:<18} {s.target:<17} {s.sim.url}  alert {s.alertname}")
        print(f"  sentinel   http://{':'.join(map(str, app.status.address))}/metrics")
        print(f"  database   {app.config.database}")
        for name, sink in self.sinks.items():
            print(f"  {name:<10} {sink.url}  (webhook receiver)")
        print(f"  act-first  {_act_first_line()}")
        print("  rules      shipped rules/vllm.yaml; the serving group's `for`s cut "
              f"{STALL_SCALE}x (VLLMEngineStalled: 2m -> {120 // STALL_SCALE}s)")
        for s in self.scenarios:
            s.sim.set_state(kv_cache_usage=0.42, num_requests_running=3, load_rps=5)
        self.say("healthy traffic on every server: 3 running, 5 requests/s, KV cache 42%")
        self._warm_up(app)
        for s in self.scenarios:
            self.say(s.begin())

    def _warm_up(self, app: App) -> None:
        """A few seconds of healthy scrapes (the stall rule compares with them), and every
        crash log joined by Sentinel: a line written before that would go unseen."""
        sources = [{"target": s.target, "source": f"file:{s.crashable.log}"}
                   for s in self.scenarios if s.crashable is not None]
        until, ready = time.monotonic() + 20, time.monotonic() + WARM_UP_S
        while time.monotonic() < until:
            joined = all(app.metrics.registry.get_sample_value("sentinel_log_source_up", labels)
                         == 1 for labels in sources)
            if joined and time.monotonic() >= ready:
                return
            time.sleep(0.1)

    # -- watching ----------------------------------------------------------------

    def _watch(self, app: App) -> bool:
        """Print alert, incident and message changes until every scenario ended."""
        assert app.pipeline is not None
        db = app.pipeline.tracker.db
        while time.monotonic() - self.started < self.deadline_s:
            self._report_messages()
            counts = self._tally()
            for s in self.scenarios:
                self._report_alert_state(app, s)
                self._report_incident(db, s, counts.get(s.key, Counts()))
                said = s.recover_if_paged()
                if said:
                    self.say(said)
            if all(s.done for s in self.scenarios):
                return True
            time.sleep(0.2)
        return False

    def _drain(self, app: App) -> bool:
        """Wait until nothing is queued and nothing arrived for QUIET_S: then count."""
        assert app.pipeline is not None
        db = app.pipeline.tracker.db
        while time.monotonic() - self.started < self.deadline_s + 10:
            self._report_messages()
            depth = outbox_depth(db, int(time.time() * 1000))
            last = max([t for sink in self.sinks.values() for t, _, _ in sink.received],
                       default=0.0)
            if depth.pending == 0 and depth.intents == 0 and time.monotonic() - last > QUIET_S:
                return True
            time.sleep(0.2)
        return False

    def _tally(self) -> dict[str, Counts]:
        # Sentinel's self-monitoring (a loaded machine misses scrapes) gets a row of its own.
        return tally({n: s.received for n, s in self.sinks.items()}, PAGER,
                     {s.target: s.key for s in self.scenarios}, self_alerts())

    def _report_alert_state(self, app: App, s: sc.Scenario) -> None:
        assert app.pipeline is not None
        states = {a.state.value for a in app.pipeline.rules.active_alerts()
                  if a.name == s.alertname and dict(a.labels).get("target") == s.target}
        state = "firing" if "firing" in states else "pending" if "pending" in states else \
            "inactive"
        if state != s.alert_state:
            self.say(f"alert {s.alertname} on {s.target} is {state}")
            s.alert_state = state

    def _report_incident(self, db: Any, s: sc.Scenario, counts: Counts) -> None:
        items = [i for i in queries.list_incidents(db, target=s.target, limit=5)
                 if i.alertname == s.alertname]
        if not items:
            return
        item = items[-1]  # the first one opened (newest first)
        if s.incident_id is None:
            s.incident_id = item.id
            self.say(f"incident #{item.id} opened: {item.alertname} on {item.target}")
        detail = queries.get_incident(db, item.id)
        if detail is None:
            return
        for event in detail.timeline[s.seen_events:]:
            self.say(f"  #{item.id} {event.kind:<20} {event.message}")
        s.seen_events = len(detail.timeline)
        if item.status != s.status:
            s.status = item.status
            if item.status == "resolved":
                self.say(f"incident #{item.id} resolved")
        s.paged = s.paged or counts.pages > 0
        if not s.done:
            s.check_done(detail, counts.resolved > 0)

    def _report_messages(self) -> None:
        for name, sink in self.sinks.items():
            while not sink.bodies.empty():
                self._say_message(name, sink.bodies.get())

    def _say_message(self, receiver: str, body: dict[str, Any]) -> None:
        alerts = body.get("alerts", [])
        names = ", ".join(f"{a['labels'].get('alertname', '?')}@{a['labels'].get('target', '?')}"
                          for a in alerts if isinstance(a, dict) and "labels" in a)
        self.say(f"webhook received: status={body.get('status')} alerts=[{names}] -> {receiver}")
        notes = alerts[0].get("annotations", {}) if alerts and isinstance(alerts[0], dict) else {}
        # What it says: the summary, what Sentinel did or tried (sentinel_action,
        # sentinel_remediation, sentinel_time_to_recovery, sentinel_excerpt), the runbook.
        said = sorted(k for k in notes if k.startswith("sentinel_"))
        for key in ("summary", *said, "runbook"):
            text = str(notes.get(key, "")).strip()
            if text:
                lines = text.splitlines()
                more = f"  (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
                print(f"           {key}: {lines[0][:100]}{more}", flush=True)

    # -- the end -------------------------------------------------------------------

    def _print_details(self, app: App) -> None:
        from sentinel.incidents import render

        assert app.pipeline is not None
        for s in self.scenarios:
            if s.incident_id is None:
                continue
            detail = queries.get_incident(app.pipeline.tracker.db, s.incident_id)
            if detail is not None:
                print()
                print(render.render_detail(detail))

    def _print_end(self, ok: bool) -> None:
        print()
        took = f"{time.monotonic() - self.started:.0f}s"
        if not ok:
            late = ", ".join(s.key for s in self.scenarios if not s.done) or "the last messages"
            print(f"demo FAILED: not over in time: {late}")
        by_key = {s.key: s for s in self.scenarios}
        if ok and sc.BACKLOG in by_key and sc.STALL in by_key:
            b, st = by_key[sc.BACKLOG], by_key[sc.STALL]
            print(f"demo finished: incidents #{b.incident_id} ({b.alertname}) and "
                  f"#{st.incident_id} ({st.alertname}) opened, paged, resolved and paged "
                  f"again in {took}")
        for s in self.scenarios:
            if ok and s.crashable is not None:
                print(f"demo finished: incident #{s.incident_id} ({s.alertname} on {s.target}) "
                      f"{s.ending}")
        print()
        print(f"What reached people, per scenario (counted at the receivers; act-first: "
              f"{'on' if act_first_supported() else 'not in this build'}):")
        rows = [self._row(s) for s in self.scenarios]
        for key, what in ((APART, "Sentinel's own health (rules/sentinel.yaml)"),
                          (OTHER, "")):
            c = self.counts.get(key)
            if c is not None:
                rows.append((key, "-", c.pages, c.updates, c.resolved, c.notifications, what))
        print(table(HEADER, rows))

    def _row(self, s: sc.Scenario) -> tuple[object, ...]:
        c = self.counts.get(s.key, Counts())
        incident = f"#{s.incident_id} {s.ending or s.status or '-'}" if s.incident_id else "-"
        return (s.key, s.target, c.pages, c.updates, c.resolved, c.notifications, incident)


def _act_first_line() -> str:
    if act_first_supported():
        return "notify.act_first {grace: 2m, receiver: chat}: a fix that verifies goes to chat"
    return "not in this build (notify.act_first): every alert pages at once"


def run_demo(keep: bool = False, only: Collection[str] = sc.ALL,
             deadline_s: float = DEADLINE_S) -> int:
    """Run the scripted failures; 0 when each reached its end in time, else 1."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    folder = Path(tempfile.mkdtemp(prefix="sentinel-demo-"))
    try:
        return Demo(folder, only, deadline_s).run()
    finally:
        if keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)

