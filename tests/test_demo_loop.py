"""Issue 33: `sentinel demo` shows the loop, and its closing table tells the truth.

The demo's two crash scenarios run for real (in process: the daemon, the
simulators, the fake Docker socket, the model simulator, two webhook
receivers on loopback): a crash on a server with a warm XLA cache is
restarted and verified; the same crash with a cold cache is refused. The
table the demo prints must equal what its receivers got, counted here
independently. The backlog and the stall take 30 s each and run in
tests/test_packaging.py::test_demo_runs_from_an_empty_folder.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sentinel.demo import Demo
from sentinel.demo.config import act_first_supported
from sentinel.demo.rules import self_alerts
from sentinel.demo.scenarios import CRASH_FIXED, CRASH_REFUSED

pytestmark = pytest.mark.integration

OWN = self_alerts()
COLUMNS = ("pages", "page updates", "resolved (pager)", "notifications (chat)")


def _printed_table(out: str) -> dict[str, dict[str, str]]:
    """The closing table: scenario → column → cell."""
    lines = out[out.index("What reached people"):].splitlines()[1:]
    header = re.split(r"\s{2,}", lines[0].strip())
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[2:] if line.strip()]
    return {row[0]: dict(zip(header, row, strict=True)) for row in rows}


def _received(demo: Demo, target: str) -> dict[str, int]:
    """Counted here from the receivers' raw deliveries, as the table's columns."""
    counts = dict.fromkeys(COLUMNS, 0)
    groups: set[str] = set()
    for receiver, sink in demo.sinks.items():
        for _, body, _ in sink.received:
            alerts = body.get("alerts", [])
            if not any(a["labels"].get("target") == target for a in alerts):
                continue
            if all(a["labels"]["alertname"] in OWN for a in alerts):
                continue  # Sentinel's self-monitoring: a row of its own

            if receiver == "chat":
                counts["notifications (chat)"] += 1
            elif body["status"] == "resolved":
                counts["resolved (pager)"] += 1
            elif body["status"] == "update" or body["groupKey"] in groups:
                counts["page updates"] += 1
            else:
                groups.add(body["groupKey"])
                counts["pages"] += 1
    return counts


def test_demo_crash_scenarios_and_their_counts(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    demo = Demo(tmp_path, only=(CRASH_FIXED, CRASH_REFUSED), deadline_s=120)
    code = demo.run()
    out = capsys.readouterr().out
    assert code == 0, out
    printed = _printed_table(out)
    assert list(printed)[:2] == [CRASH_FIXED, CRASH_REFUSED]
    assert set(list(printed)[2:]) <= {"(set apart)"}, out
    for s in demo.scenarios:
        row = printed[s.key]
        assert row["target"] == s.target
        assert {c: int(row[c]) for c in COLUMNS} == _received(demo, s.target), (s.key, out)
    # The loop, as the demo's log tells it: the warm crash restarted through the socket and
    # verified; the cold one refused for its cache, with the model's runbook on record.
    assert re.search(r"#\d+ action +verified: healthy after", out), out
    assert re.search(r"refused docker_restart on demo-gemma-cold: cold_cache", out), out
    assert "fixed by a warm restart, verified in" in printed[CRASH_FIXED]["incident"]
    assert "restart refused (cold_cache)" in printed[CRASH_REFUSED]["incident"]
    assert demo.scenarios[0].crashable is not None
    assert demo.scenarios[0].crashable.container.times("POST stop")
    assert not demo.scenarios[1].crashable.container.times("POST stop")  # type: ignore[union-attr]
    if act_first_supported():
        # Act first, then tell once: the fix goes to the chat, only the refusal pages.
        assert _received(demo, "demo-gemma-crash") == {
            "pages": 0, "page updates": 0, "resolved (pager)": 0, "notifications (chat)": 1}
        assert _received(demo, "demo-gemma-cold")["pages"] == 1
        (_, told, _), = demo.sinks["chat"].received
        notes = told["alerts"][0]["annotations"]
        assert "docker_restart" in json.dumps(notes) and "runbook" in notes, notes
