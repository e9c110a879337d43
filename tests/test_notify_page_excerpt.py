"""A page carries the crash lines (issue 48: no refused, no-policy or approval page did),
bounded so it stays readable on a phone: what actfirst.with_act_first adds to a message."""

from __future__ import annotations

from test_notify_actfirst import T0, crash

from sentinel.incidents import Database, IncidentTracker
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.models import TimelineEvent, TimelineKind
from sentinel.respond.notify import actfirst


def _with_excerpt(db: Database, lines: list[str]) -> dict[str, str]:
    (n,) = IncidentTracker(db).process([crash()], T0)
    with db.session() as s:
        s.add(TimelineEvent(incident_id=n.incident_id, at=ms_to_dt(T0), message="hbm_oom",
                            kind=TimelineKind.LOG_EXCERPT, data={"excerpt": lines}))
    with db.session() as s:
        return actfirst.with_act_first(None)(s, n.incident_id)


def test_a_page_carries_the_excerpt(incident_db: Database) -> None:
    ann = _with_excerpt(incident_db, ["ERROR EngineCore encountered a fatal error",
                                      "RuntimeError: RESOURCE_EXHAUSTED: HBM"])
    assert ann[actfirst.EXCERPT] == ("ERROR EngineCore encountered a fatal error\n"
                                     "RuntimeError: RESOURCE_EXHAUSTED: HBM")


def test_a_long_excerpt_is_cut_at_a_line_and_says_so(incident_db: Database) -> None:
    ann = _with_excerpt(incident_db, [f"line {i} " + "x" * 60 for i in range(200)])
    text = ann[actfirst.EXCERPT]
    assert len(text) <= actfirst.PAGE_EXCERPT_MAX + 80
    assert text.startswith("line 0 ") and "more characters on the incident's timeline" in text
    assert all(line.startswith("line ") for line in text.splitlines()[:-1])
