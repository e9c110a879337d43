"""History at scale: 1,000,000 incidents, then p95 of `GET /api/v1/incidents` per filter and
`GET /api/v1/stats` over 30 days, through the real HTTP listener, on SQLite and PostgreSQL.

The generator writes a year of history for a large fleet (1M incidents over 365 days,
about 82,000 in any 30 days): 20 alert names, 300 targets, 8 categories; 1 % open (the
newest); per incident one alert, the firing/notification/resolved timeline events, and a
verified remediation (with its time to recovery) for 30 %. Rows go in through
SQLAlchemy Core in batches (SQLite) or COPY (PostgreSQL), after `alembic upgrade head`.

    python bench/history.py --db sqlite --n 1000000          # a file under /tmp
    python bench/history.py --db postgres --n 1000000        # a throwaway cluster
    python bench/history.py --db sqlite --n 1000000 --reuse  # measure an existing file again
    python bench/history.py --db postgres --url postgresql://… [--reuse]  # a server you run

Design targets: p95 < 20 ms for every listing filter, stats over 30 days < 500 ms.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402
from sqlalchemy import insert, text  # noqa: E402

from sentinel.api.server import build_surfaces  # noqa: E402
from sentinel.api.service import ApiService  # noqa: E402
from sentinel.config.api import ApiConfig  # noqa: E402
from sentinel.daemon.http import StatusServer  # noqa: E402
from sentinel.incidents.db import Database  # noqa: E402
from sentinel.incidents.models import Incident, IncidentAlert, TimelineEvent  # noqa: E402
from sentinel.incidents.models_remediation import RemediationAttempt  # noqa: E402

ALERTS = [f"VLLMAlert{i:02d}" for i in range(20)]
CATEGORIES = ["hbm_oom", "kv_cache", "compile", "preempted", "crash", "latency", "probe", "net"]
TARGETS = [f"tpu-{i:03d}" for i in range(300)]
BATCH = 20_000


def rows_for(i: int, n: int, now: datetime, days: int, rng: random.Random
             ) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]],
                        dict[str, Any] | None]:
    """One incident (id i+1) and its alert, events and maybe a remediation attempt."""
    iid = i + 1
    opened = now - timedelta(seconds=(n - i) * days * 86400 / n)
    alert, target = ALERTS[rng.randrange(20)], TARGETS[rng.randrange(300)]
    category = CATEGORIES[ALERTS.index(alert) % 8]
    is_open = i >= n - n // 100
    detect_ms = rng.randrange(5_000, 120_000)
    resolve = timedelta(milliseconds=rng.randrange(30_000, 3_600_000))
    resolved = None if is_open else opened + resolve
    inc = {"id": iid, "group_key": f"{alert}/{target}/{iid}", "alertname": alert,
           "target": target, "status": "open" if is_open else "resolved",
           "severity": "critical", "summary": f"{alert} on {target}", "labels":
           {"alertname": alert, "target": target, "category": category},
           "opened_at": opened, "resolved_at": resolved, "updated_at": resolved or opened,
           "category": category, "detect_ms": detect_ms,
           "resolve_ms": None if is_open else resolve // timedelta(milliseconds=1)}
    active = opened - timedelta(milliseconds=detect_ms)
    al = {"incident_id": iid, "fingerprint": f"{iid:016x}", "labels": inc["labels"],
          "annotations": {"summary": inc["summary"]}, "state": "firing" if is_open else
          "resolved", "value": 1.0, "value_recorded_at": None, "active_at": active,
          "fired_at": opened, "resolved_at": resolved, "notified_firing_at": opened,
          "notified_resolved_at": resolved}
    events = [{"incident_id": iid, "at": opened, "kind": "firing", "message": "firing",
               "data": None},
              {"incident_id": iid, "at": opened, "kind": "notification_sent",
               "message": "firing notification to oncall sent", "data": {"receiver": "oncall"}}]
    if resolved is not None:
        events.append({"incident_id": iid, "at": resolved, "kind": "incident_resolved",
                       "message": "resolved", "data": None})
    attempt = None
    if rng.random() < 0.3:
        recovery = rng.randrange(20_000, 300_000)
        attempt = {"incident_id": iid, "target": target, "policy": "restart", "step": 0,
                   "action": "docker_restart", "manual": False, "status": "succeeded",
                   "requested_at": opened, "acted_at": opened,
                   "finished_at": active + timedelta(milliseconds=recovery),
                   "recovery_ms": recovery, "detail": "restarted", "data": None}
    return inc, al, events, attempt


def generate(db: Database, n: int, now: datetime, days: int = 365, seed: int = 1) -> None:
    """Write n incidents ending at `now` (the schema must exist)."""
    rng = random.Random(seed)
    t0 = time.perf_counter()
    for start in range(0, n, BATCH):
        incs, alerts, events, attempts = [], [], [], []
        for i in range(start, min(n, start + BATCH)):
            inc, al, ev, at = rows_for(i, n, now, days, rng)
            incs.append(inc)
            alerts.append(al)
            events += ev
            if at is not None:
                attempts.append(at)
        if db.dialect == "postgresql":
            _copy(db, incs, alerts, events, attempts)
        else:
            with db.session() as s:
                s.execute(insert(Incident), incs)
                s.execute(insert(IncidentAlert), alerts)
                s.execute(insert(TimelineEvent), events)
                if attempts:
                    s.execute(insert(RemediationAttempt), attempts)
        done = min(n, start + BATCH)
        if done % 200_000 == 0 or done == n:
            print(f"  {done:>9,} incidents written ({time.perf_counter() - t0:.0f}s)",
                  flush=True)
    # Steady state: autovacuum would have set the visibility map and statistics by now.
    if db.dialect == "postgresql":
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))
    else:
        with db.engine.begin() as conn:
            conn.execute(text("ANALYZE"))


def _copy(db: Database, *tables: list[dict[str, Any]]) -> None:
    import json

    names = ["incidents", "incident_alerts", "timeline_events", "remediation_attempts"]
    raw = db.engine.raw_connection()
    try:
        cur = raw.cursor()
        for name, rows in zip(names, tables, strict=True):
            if not rows:
                continue
            cols = list(rows[0])
            with cur.copy(f"COPY {name} ({', '.join(cols)}) FROM STDIN") as cp:  # type: ignore[attr-defined]
                for r in rows:
                    cp.write_row([json.dumps(v) if isinstance(v, dict) else v
                                  for v in (r[c] for c in cols)])
        raw.commit()
    finally:
        raw.close()


FILTERS: list[tuple[str, dict[str, str]]] = [
    ("none", {}),
    ("status=open", {"status": "open"}),
    ("status=resolved", {"status": "resolved"}),
    ("alertname", {"alertname": "VLLMAlert07"}),
    ("target", {"target": "tpu-123"}),
    ("category", {"category": "kv_cache"}),
    ("since=7d", {"since": "7d"}),
    ("until=180d", {"until": "180d"}),
]


def measure(db: Database, runs: int) -> dict[str, Any]:
    """p50/p95 per listing filter (first page and a deep page) and stats over 30 days."""
    service = ApiService(db)
    surfaces = build_surfaces(service, ApiConfig(), "127.0.0.1")
    server = StatusServer("127.0.0.1", 0, CollectorRegistry(), lambda: None, surfaces.routes,
                          surfaces.lifespans)
    server.start()
    url = "http://{}:{}".format(*server.address)
    out: dict[str, Any] = {}
    try:
        with httpx.Client(base_url=url, timeout=60) as c:
            for name, params in FILTERS:
                c.get("/api/v1/incidents", params=params).raise_for_status()  # warm
                # Deep pages: walk a few pages in, then time pages from there.
                cursor = None
                for _ in range(5):
                    cursor = c.get("/api/v1/incidents", params=params | (
                        {"cursor": cursor} if cursor else {})).json()["next_cursor"]
                times = []
                for k in range(runs):
                    p = params | ({"cursor": cursor} if k % 2 and cursor else {})
                    t = time.perf_counter()
                    r = c.get("/api/v1/incidents", params=p)
                    times.append((time.perf_counter() - t) * 1000)
                    r.raise_for_status()
                out[f"incidents {name}"] = _summary(times)
            for by in ("alertname", "target", "category"):
                c.get("/api/v1/stats", params={"since": "30d", "by": by}).raise_for_status()
                times = []
                for _ in range(max(5, runs // 20)):
                    t = time.perf_counter()
                    r = c.get("/api/v1/stats", params={"since": "30d", "by": by})
                    times.append((time.perf_counter() - t) * 1000)
                    r.raise_for_status()
                out[f"stats 30d by {by}"] = _summary(times) | {
                    "incidents": r.json()["total"]["count"]}
    finally:
        server.stop()
    return out


def _summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {"p50": round(statistics.median(ms), 2),
            "p95": round(ms[max(0, int(len(ms) * 0.95) - 1)], 2), "max": round(ms[-1], 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--path", default="/tmp/sentinel-bench-history.db")
    ap.add_argument("--reuse", action="store_true", help="measure an existing database again")
    ap.add_argument("--url", help="a database URL to use instead (PostgreSQL you started)")
    args = ap.parse_args()
    cluster = None
    if args.url:
        url = args.url
    elif args.db == "postgres":
        import fixtures_postgres

        bindir = fixtures_postgres._pg_bindir()
        if bindir is None:
            print("PostgreSQL binaries not found", file=sys.stderr)
            return 2
        cluster = fixtures_postgres._Cluster(bindir)
        url = cluster.start()
    else:
        path = Path(args.path)
        if path.exists() and not args.reuse:
            path.unlink()
        url = f"sqlite:///{path}"
    try:
        db = Database(url)
        db.upgrade()
        fresh = not args.reuse
        if fresh:
            print(f"generating {args.n:,} incidents on {args.db} ...", flush=True)
            generate(db, args.n, datetime.now(tz=UTC))
        results = measure(db, args.runs)
        print(f"\n{args.db}, {args.n:,} incidents, {args.runs} requests per filter "
              "(alternating first page and a deep page):")
        for name, r in results.items():
            extra = f"  ({r['incidents']:,} incidents in window)" if "incidents" in r else ""
            print(f"  {name:<28} p50 {r['p50']:>7.2f} ms  p95 {r['p95']:>7.2f} ms  "
                  f"max {r['max']:>7.2f} ms{extra}")
        db.dispose()
    finally:
        if cluster is not None:
            cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
