"""Storm benchmark: the whole fleet flips into one alert at the same instant, then recovers.

Run: `python bench/storm.py --targets 1000` (SQLite) or `--db postgres` (a throwaway
cluster, as bench/history.py starts) or `--db-url postgresql://…`.

bench/fleet.py's helper serves N loopback vLLM targets, calm (nothing waiting).
`sentinel run` scrapes them every 5 s and evaluates the shipped rules every 5 s,
with a webhook receiver on loopback, and `NOTIFY_SOCKET`/`WATCHDOG_USEC` pointing
at a datagram socket this script reads (a systemd stand-in; `--watchdog-sec`,
default 10, so pings are due every 5 s). Once every target was scraped and the
daemon settled, every target starts serving 3 waiting requests at the same
instant: VLLMRequestsQueued (`for: 30s`) goes pending and fires on all of them.
It prints:

- time to the first page (from the flip; `for` is 30 s of it);
- time until every target's alert is recorded (firing in `alert_states`, and an
  incident row for it);
- pages and messages the receiver got (a page: a firing message);
- the longest gap between watchdog pings, against half of WatchdogSec;
- /healthz answers during the storm (200 / 503 / no answer in 5 s);
- the daemon's RSS (with its collect workers);

then every target goes calm again and it prints the time until every alert and
incident is resolved, and the resolves sent. Finally SIGTERM, and how long the
daemon took to exit. Figures from a shared machine: compare runs of one session.

Pages, messages and resolves count the messages about the storm's alert; Sentinel's
own alerts (a loaded machine makes it miss scrapes and evaluations, and it says so)
are listed apart. Fleet-wide correlation (incidents/fleet.py): the storm opens ONE fleet incident
(every target keeps its own incident, joined to it) and the receiver gets one
page for it; a later count is an `update` message no sooner than the route's
group_interval (5 min with the implicit route: usually after this run), and the
fleet's resolve comes when the last target recovered. It prints the fleet
incidents opened and the updates too. Before correlation the pages figure was
about one per target.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from fleet import FleetProcess, _raise_fd_limit, free_port, rss_mb  # noqa: E402

RULE = "VLLMRequestsQueued"


# -- what the daemon tells the outside ------------------------------------------------

class Receiver:
    """A webhook receiver on loopback: every message, when it came, firing or resolved."""

    def __init__(self) -> None:
        # (monotonic, status, alerts): messages about RULE (the storm's fleet incident)
        self.messages: list[tuple[float, str, int]] = []
        # (monotonic, status, alertnames): every other message (Sentinel's own alerts)
        self.others: list[tuple[float, str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    doc = json.loads(body)
                    status, alerts = doc.get("status", "?"), doc.get("alerts", [])
                except ValueError:
                    status, alerts = "?", []
                names = sorted({a.get("labels", {}).get("alertname", "") for a in alerts})
                if RULE in names:
                    outer.messages.append((time.monotonic(), status, len(alerts)))
                else:
                    outer.others.append((time.monotonic(), status, ",".join(names)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def since(self, t0: float, status: str) -> list[tuple[float, str, int]]:
        return [m for m in self.messages if m[0] >= t0 and m[1] == status]

    def stop(self) -> None:
        self.httpd.shutdown()


class Watchdog:
    """systemd's side of the watchdog: a datagram socket, every WATCHDOG=1 timed."""

    def __init__(self, folder: Path) -> None:
        self.path = str(folder / "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.5)
        self.pings: list[float] = []
        self.states: list[str] = []
        self._stop = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop:
            try:
                data = self.sock.recv(256).decode(errors="replace")
            except TimeoutError:
                continue
            except OSError:
                return
            if data == "WATCHDOG=1":
                self.pings.append(time.monotonic())
            else:
                self.states.append(data)

    def longest_gap(self, t0: float, t1: float) -> float:
        """The longest time without a ping between t0 and t1 (edges included)."""
        times = [t0] + [p for p in self.pings if t0 <= p <= t1] + [t1]
        return max(b - a for a, b in zip(times, times[1:], strict=False))

    def stop(self) -> None:
        self._stop = True
        self.sock.close()


class Health:
    """Polls /healthz once a second: 200, 503, or no answer within 5 s."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/healthz"
        self.answers: list[tuple[float, str]] = []
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    code = str(r.status)
            except urllib.error.HTTPError as e:
                code = str(e.code)
            except OSError:
                code = "none"
            self.answers.append((time.monotonic(), code))

    def between(self, t0: float, t1: float) -> dict[str, int]:
        out: dict[str, int] = {}
        for t, code in self.answers:
            if t0 <= t <= t1:
                out[code] = out.get(code, 0) + 1
        return out

    def stop(self) -> None:
        self._stop.set()


# -- the database, read beside the daemon ---------------------------------------------

def recorded(url: str) -> tuple[int, int, int]:
    """(alerts of RULE firing in alert_states, open per-target incidents of RULE, fleet
    incidents of RULE ever) in the daemon's database.

    SQLite is read through a plain read-only connection: Sentinel's own sessions
    begin IMMEDIATE (they take the write lock), and this reader must neither wait
    for the daemon's transactions nor hold them up (WAL readers do neither)."""
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(f"file:{url[len('sqlite:///'):]}?mode=ro", uri=True,
                               timeout=60)
        try:
            q = conn.execute
            firing = q("SELECT count(*) FROM alert_states WHERE rule = ? AND state = "
                       "'firing'", (RULE,)).fetchone()[0]
            open_ = q("SELECT count(*) FROM incidents WHERE alertname = ? AND status = "
                      "'open' AND target != ''", (RULE,)).fetchone()[0]
            ever = q("SELECT count(*) FROM incidents WHERE alertname = ? AND target = ''",
                     (RULE,)).fetchone()[0]
        finally:
            conn.close()
        return int(firing), int(open_), int(ever)
    from sqlalchemy import func, select

    from sentinel.incidents.db import Database
    from sentinel.incidents.models import AlertStateRow, Incident

    db = Database(url)
    try:
        with db.engine.connect() as conn:
            firing = conn.scalar(select(func.count()).select_from(AlertStateRow).where(
                AlertStateRow.rule == RULE, AlertStateRow.state == "firing")) or 0
            open_ = conn.scalar(select(func.count()).select_from(Incident).where(
                Incident.alertname == RULE, Incident.status == "open",
                Incident.target != "")) or 0
            ever = conn.scalar(select(func.count()).select_from(Incident).where(
                Incident.alertname == RULE, Incident.target == "")) or 0
    finally:
        db.dispose()
    return int(firing), int(open_), int(ever)


# -- one run --------------------------------------------------------------------------

@dataclass
class Storm:
    targets: int
    db: str
    first_page_s: float | None = None
    all_recorded_s: float | None = None
    pages: int = 0
    messages: int = 0
    pages_by_end: int = 0  # firing messages from the flip to the end of the run
    updates_by_end: int = 0  # update messages (a fleet incident's new count)
    others: dict[str, int] = field(default_factory=dict)  # Sentinel's own, by alert names
    fleet_incidents: int = 0  # fleet incidents of RULE opened
    longest_ping_gap_s: float = 0.0
    watchdog_half_s: float = 0.0
    healthz: dict[str, int] = field(default_factory=dict)
    rss_mb_max: float = 0.0
    all_resolved_s: float | None = None
    resolves: int = 0
    recovery_gap_s: float = 0.0
    recovery_healthz: dict[str, int] = field(default_factory=dict)
    sigterm_exit_s: float | None = None
    load: tuple[float, ...] = ()  # load average at the flip


def config(work: Path, ports: list[int], listen: int, db_url: str, hook: str) -> Path:
    lines = [f"database: {db_url}", f"listen: 127.0.0.1:{listen}",
             f"rule_files: [{ROOT / 'rules' / 'vllm.yaml'}, {ROOT / 'rules' / 'sentinel.yaml'}]",
             "evaluation_interval: 5s", "scrape_interval: 5s", "scrape_timeout: 4s",
             "probe_interval: 0s",
             "receivers:", f"  - {{name: oncall, webhook: {{url: '{hook}'}}}}",
             "targets:"]
    lines += [f"  - {{name: t{i}, url: 'http://127.0.0.1:{p}'}}" for i, p in enumerate(ports)]
    path = work / "sentinel.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def wait(pred, timeout_s: float, every_s: float = 1.0) -> float | None:  # noqa: ANN001
    """Seconds until pred() held, or None after timeout_s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if pred():
            return time.monotonic() - t0
        time.sleep(every_s)
    return None


def run(args: argparse.Namespace, db_url: str, db_name: str, work: Path) -> Storm:
    out = Storm(args.targets, db_name, watchdog_half_s=args.watchdog_sec / 2)
    fleet = FleetProcess(args.targets)
    receiver, dog = Receiver(), Watchdog(work)
    listen = free_port()
    cfg = config(work, fleet.ports, listen, db_url, receiver.url)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NOTIFY_SOCKET": dog.path,
           "WATCHDOG_USEC": str(int(args.watchdog_sec * 1e6))}
    env.pop("WATCHDOG_PID", None)
    log = (work / "sentinel.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "sentinel", "run", "-c", str(cfg)],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    health = None
    try:
        if wait(lambda: "READY=1" in dog.states, 180) is None:
            raise SystemExit("the daemon did not start; see " + str(work / "sentinel.log"))
        fleet.counts(reset=True)
        if wait(lambda: fleet.counts()["hit"] >= args.targets, 180) is None:
            raise SystemExit("not every target was scraped within 180 s")
        health = Health(listen)
        time.sleep(args.settle)
        print(f"{args.targets} targets scraped; flipping every target into "
              f"{RULE} at once", flush=True)
        out.load = tuple(round(x, 1) for x in os.getloadavg())
        t0 = time.monotonic()
        fleet.flip(True)
        deadline = t0 + args.seconds
        rss = [rss_mb(proc.pid)]
        while time.monotonic() < deadline:
            rss.append(rss_mb(proc.pid))
            firing, open_, _ = recorded(db_url)
            if out.first_page_s is None and receiver.since(t0, "firing"):
                out.first_page_s = receiver.since(t0, "firing")[0][0] - t0
            if firing >= args.targets and open_ >= args.targets:
                out.all_recorded_s = time.monotonic() - t0
                break
            time.sleep(1.0)
        # The pages follow the route's group_wait (30 s by default) after the incidents
        # are committed: wait for the first, then until no message came for 10 s.
        while time.monotonic() < deadline:
            rss.append(rss_mb(proc.pid))
            sent = [m for m in receiver.messages if m[0] >= t0]
            if sent and time.monotonic() - sent[-1][0] > 10:
                break
            time.sleep(1.0)
        t1 = time.monotonic()
        if out.first_page_s is None and receiver.since(t0, "firing"):
            out.first_page_s = receiver.since(t0, "firing")[0][0] - t0
        out.pages = len(receiver.since(t0, "firing"))
        out.messages = len([m for m in receiver.messages if m[0] >= t0])
        out.longest_ping_gap_s = dog.longest_gap(t0, t1)
        out.healthz = health.between(t0, t1)
        out.rss_mb_max = max(rss)
        print("the fleet recovers", flush=True)
        fleet.flip(False)
        t2 = time.monotonic()
        took = wait(lambda: recorded(db_url)[:2] == (0, 0), args.seconds)
        out.all_resolved_s = took
        end = time.monotonic() + args.seconds  # the resolves leave the outbox
        while time.monotonic() < end:
            sent = receiver.since(t2, "resolved")
            if sent and time.monotonic() - sent[-1][0] > 10:
                break
            time.sleep(1.0)
        t3 = time.monotonic()
        out.resolves = len(receiver.since(t2, "resolved"))
        out.recovery_gap_s = dog.longest_gap(t2, t3)
        out.pages_by_end = len(receiver.since(t0, "firing"))
        out.updates_by_end = len(receiver.since(t0, "update"))
        out.fleet_incidents = recorded(db_url)[2]
        for at, status, names in receiver.others:
            if at >= t0:
                key = f"{status} {names}"
                out.others[key] = out.others.get(key, 0) + 1
        out.recovery_healthz = health.between(t2, t3)
    finally:
        if health is not None:
            health.stop()
        ts = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
            out.sigterm_exit_s = time.monotonic() - ts
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if args.keep_log:
            Path(args.keep_log).write_text((work / "sentinel.log").read_text(errors="replace"))
        fleet.stop()
        receiver.stop()
        dog.stop()
    return out


def _fmt(v: float | None) -> str:
    return "not within the window" if v is None else f"{v:.1f} s"


def report(r: Storm) -> None:
    rows = [
        ("targets, database", f"{r.targets}, {r.db}"),
        ("load average at the flip", " ".join(f"{x:g}" for x in r.load)),
        ("time to first page (for: 30s)", _fmt(r.first_page_s)),
        ("every target's alert recorded", _fmt(r.all_recorded_s)),
        ("pages / messages in the storm", f"{r.pages} / {r.messages} "
                                          f"({r.pages_by_end} pages, {r.updates_by_end} "
                                          "updates by the end)"),
        ("fleet incidents opened", str(r.fleet_incidents)),
        (f"other messages (not {RULE})", "; ".join(f"{k}: {v}" for k, v in
                                                   sorted(r.others.items())) or "none"),
        ("longest watchdog gap (bound)", f"{r.longest_ping_gap_s:.1f} s "
                                         f"({r.watchdog_half_s:.1f} s)"),
        ("/healthz during the storm", ", ".join(f"{k}: {v}" for k, v in sorted(r.healthz.items()))),
        ("RSS max (with workers)", f"{r.rss_mb_max:.0f} MB"),
        ("every alert and incident resolved", _fmt(r.all_resolved_s)),
        ("resolves sent", str(r.resolves)),
        ("recovery: longest watchdog gap", f"{r.recovery_gap_s:.1f} s"),
        ("recovery: /healthz", ", ".join(f"{k}: {v}" for k, v in
                                         sorted(r.recovery_healthz.items()))),
        ("SIGTERM to exit", _fmt(r.sigterm_exit_s)),
    ]
    width = max(len(k) for k, _ in rows)
    print()
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--db-url", help="a PostgreSQL you run, instead of a throwaway cluster")
    ap.add_argument("--seconds", type=float, default=240.0,
                    help="how long the storm (and the recovery) may take")
    ap.add_argument("--settle", type=float, default=15.0,
                    help="seconds between every target scraped once and the flip")
    ap.add_argument("--watchdog-sec", type=float, default=10.0,
                    help="the WatchdogSec the daemon is told (it pings at half)")
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--keep-log", metavar="FILE", help="copy the daemon's log here")
    args = ap.parse_args()
    _raise_fd_limit()
    cluster = None
    with tempfile.TemporaryDirectory(prefix="storm-") as tmp:
        work = Path(tmp)
        if args.db_url:
            url, name = args.db_url, "postgresql"
        elif args.db == "postgres":
            import fixtures_postgres

            bindir = fixtures_postgres._pg_bindir()
            if bindir is None:
                print("PostgreSQL binaries not found", file=sys.stderr)
                return 2
            cluster = fixtures_postgres._Cluster(bindir)
            url, name = cluster.start(), "postgresql"
        else:
            url, name = f"sqlite:///{work / 'sentinel.db'}", "sqlite"
        try:
            result = run(args, url, name, work)
        finally:
            if cluster is not None:
                cluster.stop()
    report(result)
    if args.json:
        from dataclasses import asdict

        Path(args.json).write_text(json.dumps(asdict(result), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
