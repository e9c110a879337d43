"""How many bytes does an incident's stored plot take, and what does keeping it cost?

A fleet of `--targets` servers reports KV-cache usage, queue length and `up`
every 5 s into the embedded store; one incident on one of them lasts
`--hours`. The evidence job (SeriesRecorder, on SQLite) runs every 30 s over
it, as the daemon does: the first capture at opening, then extensions, then
the final one after the resolution. Prints the row's size and points, and the
CPU of the first capture and of an extension (each query evaluates the rule
over the whole fleet, then keeps the incident's series).

    python bench/incident_series.py [--targets 1000] [--hours 2]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, IncidentAlert
from sentinel.incidents.models_series import IncidentSeries
from sentinel.incidents.series_capture import CaptureSettings
from sentinel.incidents.series_recorder import SeriesRecorder
from sentinel.promql import Engine
from sentinel.store.memory import MemoryStore

RULE = "max by (target) (vllm:kv_cache_usage_perc) > 0.85"
T0 = 1_800_000_000_000
SCRAPE_MS = 5_000
TICK_MS = 30_000


def fill(store: MemoryStore, targets: int, start: int, end: int, onset: int, resolved: int
         ) -> None:
    """Every target's series every 5 s; target 0 nearly full between onset and resolution."""
    for t in range(start, end + 1, SCRAPE_MS):
        for k in range(targets):
            name = f"tpu-{k}"
            wave = 0.5 + 0.2 * math.sin(t / 600_000 + k)
            kv = 0.9 + 0.08 * math.sin(t / 60_000) if k == 0 and onset <= t < resolved else wave
            store.add((("__name__", "vllm:kv_cache_usage_perc"), ("target", name)), t, kv)
            store.add((("__name__", "vllm:num_requests_waiting"), ("target", name)), t,
                      float(int(20 * wave)))
            store.add((("__name__", "up"), ("target", name)), t, 1.0)


def main() -> None:
    """Run the recorder over one incident and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--hours", type=float, default=2.0)
    args = ap.parse_args()
    duration = int(args.hours * 3_600_000)
    onset, resolved = T0, T0 + duration
    settings = CaptureSettings(step_ms=SCRAPE_MS)
    store = MemoryStore(retention_ms=10**13)
    fill(store, args.targets, onset - settings.before_ms, resolved + settings.after_ms,
         onset, resolved)
    engine = Engine(store)
    with tempfile.TemporaryDirectory() as d:
        db = Database(f"sqlite:///{Path(d) / 'bench.db'}")
        db.upgrade()
        with db.session() as s:
            inc = Incident(group_key="KV/tpu-0", alertname="KV", target="tpu-0", status="open",
                           severity="warning", summary="", labels={"target": "tpu-0"},
                           opened_at=ms_to_dt(onset), resolved_at=None,
                           updated_at=ms_to_dt(onset))
            s.add(inc)
            s.flush()
            iid = inc.id
            s.add(IncidentAlert(incident_id=iid, fingerprint="0" * 16,
                                labels={"alertname": "KV", "target": "tpu-0"}, annotations={},
                                state="firing", value=0.9, value_recorded_at=None,
                                active_at=ms_to_dt(onset), fired_at=ms_to_dt(onset),
                                resolved_at=None, notified_firing_at=None,
                                notified_resolved_at=None))
        # The store keeps 6 minutes back at any time (a rule's 5 m lookback + 1 m), as usual.
        recorder = SeriesRecorder(db, engine.query, lambda n: RULE if n == "KV" else None,
                                  settings, earliest_ms=lambda now: now - 360_000)
        cpu: list[float] = []
        now = onset + TICK_MS // 2
        while True:
            if now >= resolved:
                with db.session() as s:
                    row = s.get(Incident, iid)
                    if row is not None and row.status == "open":
                        row.status, row.resolved_at = "resolved", ms_to_dt(resolved)
            c0 = time.process_time()
            recorder.tick(now)
            cpu.append(time.process_time() - c0)
            with db.session() as s:
                stored = s.get(IncidentSeries, iid)
                if stored is not None and stored.final:
                    size, points, step = len(stored.data), stored.points, stored.step_ms
                    break
            now += TICK_MS
    print(f"fleet: {args.targets} targets × 3 series at 5 s; incident of {args.hours:g} h, "
          f"evidence job every {TICK_MS // 1000} s ({len(cpu)} runs)")
    print(f"stored row: {size:,} bytes, {points:,} points, step {step / 1000:g} s "
          f"({size / max(points, 1):.2f} bytes a point)")
    print(f"CPU: first capture {cpu[0] * 1000:.1f} ms; extension median "
          f"{statistics.median(cpu[1:-1]) * 1000:.1f} ms, max {max(cpu[1:-1]) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
