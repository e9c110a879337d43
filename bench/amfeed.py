"""How soon after Sentinel's evaluation does an alert, and its resolve, reach Alertmanager?

Issue 48: Alertmanager as a receiver is fed like Prometheus's notifier: every
alert state change is posted at the notify round that follows the evaluation
that made it, whatever the route's group_wait and group_interval (here 30 s and
5 min, as a real route would have them). The notify stage is wired as the daemon
wires it (tracker → dispatcher → resender, SQLite) against Debian's
Alertmanager on loopback; for each of `--alerts` targets one alert fires, then
resolves, and the bench prints, from the evaluation's commit: the notify round's
duration, and when Alertmanager's `/api/v2/alerts` first shows the change
(polled every 5 ms). The route's group_wait would have held a new alert 30 s.

    python bench/amfeed.py [--alerts 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _alertmanager import Alertmanager  # noqa: E402

from sentinel.config.notify import RouteConfig  # noqa: E402
from sentinel.incidents.db import Database  # noqa: E402
from sentinel.incidents.tracker import IncidentTracker  # noqa: E402
from sentinel.model import Alert, AlertState, labels_of  # noqa: E402
from sentinel.respond.notify.alertmanager import AlertmanagerReceiver  # noqa: E402
from sentinel.respond.notify.amresend import AlertmanagerResender  # noqa: E402
from sentinel.respond.notify.dispatcher import Dispatcher, DispatchSettings  # noqa: E402
from sentinel.respond.notify.outbox import Outbox  # noqa: E402
from sentinel.respond.notify.routing import build_route  # noqa: E402


def _alert(target: str, at: int) -> Alert:
    return Alert(group="g", rule="VLLMKVCacheHigh",
                 labels=labels_of({"alertname": "VLLMKVCacheHigh", "target": target,
                                   "severity": "warning"}),
                 annotations=(), state=AlertState.FIRING, value=1.0, active_at_ms=at,
                 last_eval_ms=at, fired_at_ms=at)


def _shown(url: str, target: str) -> bool:
    alerts = httpx.get(f"{url}/api/v2/alerts", timeout=5).json()
    return any(a["labels"].get("target") == target for a in alerts)


def _until(url: str, target: str, present: bool, t0: float) -> float:
    while _shown(url, target) != present:
        if time.perf_counter() - t0 > 30:
            raise SystemExit(f"{target}: Alertmanager did not follow within 30 s")
        time.sleep(0.005)  # the poll step of the measurement
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alerts", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        am = Alertmanager(Path(tmp) / "am", "http://127.0.0.1:9/unused",
                          {"receiver": "hook", "group_wait": "30s"})
        url = f"http://{am.address}"
        db = Database(f"sqlite:///{tmp}/s.db")
        db.upgrade()
        route = RouteConfig.model_validate({"receiver": "am", "group_by": ["target"],
                                            "group_wait": "30s", "group_interval": "5m"})
        rx = AlertmanagerReceiver("am", url, timeout_s=2)
        outbox = Outbox(None)
        tracker = IncidentTracker(db, outbox=outbox)
        dispatcher = Dispatcher(db, outbox, DispatchSettings(build_route(route, ["am"]),
                                                             direct=frozenset({"am"})))
        resender = AlertmanagerResender(db, [rx])
        rows: dict[str, list[float]] = {"fire round": [], "fire shown": [],
                                        "resolve round": [], "resolve shown": []}
        try:
            for i in range(args.alerts):
                target = f"t{i}"
                for what, state in (("fire", None), ("resolve", "resolved")):
                    now = int(time.time() * 1000)
                    alert = _alert(target, now)
                    if state:
                        alert = replace(alert, state=AlertState.INACTIVE, resolved_at_ms=now)
                    tracker.process([alert], now)
                    t0 = time.perf_counter()
                    stats = dispatcher.run(now)
                    resender.run(now, changed=stats.intents > 0 or stats.pushed > 0)
                    rows[f"{what} round"].append(time.perf_counter() - t0)
                    rows[f"{what} shown"].append(_until(url, target, state is None, t0))
        finally:
            rx.close()
            am.stop()
            db.dispose()
    print(f"{args.alerts} alerts; Sentinel's route: group_wait 30s, group_interval 5m")
    print(f"{'from the evaluation commit':28} {'median ms':>10} {'max ms':>10}")
    for name, xs in rows.items():
        print(f"{name:28} {statistics.median(xs) * 1000:10.1f} {max(xs) * 1000:10.1f}")


if __name__ == "__main__":
    main()
