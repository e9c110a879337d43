"""bench/probe_toggle.py's toggle really stops and restarts the daemon's probes.

The toggling benches (probe_toggle, probe_antiphase) reach into the App
(`app.probes`, `app.scrape_jobs`): if a rename or a change in how probe
jobs are scheduled left probes running in the "off" windows, the benches
would go on printing a figure near 0 %. Here a ToggledSentinel, in a child
process (it tunes the collector and malloc as the daemon does), probes three
of the fleet helper's targets; the helper counts the /health requests it
answers over one probe interval with probes off, then on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
INTERVAL_S = 15  # the default probe interval, which the bench's config keeps

CHILD = f"""
import json, sys, time
sys.path.insert(0, {str(ROOT)!r})
from bench.fleet import FleetProcess
from bench.probe_toggle import ToggledSentinel

fleet = FleetProcess(3, traffic="idle")
try:
    s = ToggledSentinel(fleet.ports)
    try:
        jobs = s.app.scrape_jobs
        names = [t.name for t in s.app.probes.targets]
        scheduled = lambda: sum(jobs.get("probe:" + n) is not None for n in names)
        out = {{"targets": len(names), "at_start": scheduled()}}
        time.sleep(2)
        s.set_probes(False)
        out["off_jobs"] = scheduled()
        time.sleep(2)  # a probe in flight at the toggle finishes
        fleet.counts(reset=True)
        cpu, threads, missed = s.measure_until(time.time() + {INTERVAL_S} + 1)
        out["off_health"] = fleet.counts()["probes"].get("health", 0)
        out["cpu"], out["missed"] = cpu, missed
        s.set_probes(True)
        out["on_jobs"] = scheduled()
        fleet.counts(reset=True)
        time.sleep({INTERVAL_S} + 1)
        out["on_health"] = fleet.counts()["probes"].get("health", 0)
    finally:
        s.stop()
finally:
    fleet.stop()
print(json.dumps(out))
"""


def test_toggle_stops_the_probes_and_brings_them_back() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["targets"] == 3 and got["at_start"] == 3, got
    assert got["off_jobs"] == 0 and got["off_health"] == 0, got
    assert got["on_jobs"] == 3, got
    assert got["on_health"] >= 3, got  # each target probed once an interval
    assert 0 < got["cpu"] < 2 and got["missed"] == 0, got
