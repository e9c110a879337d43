"""A symptom's page names its cause (issue 48): when the incident carries a crash
signature's excerpt and its page is about `VLLMTargetDown` (a symptom), the page's
summary leads with the cause. Through the real tracker, dispatcher (with the daemon's
annotations), outbox and sender to a webhook on loopback, with time handed in."""

from __future__ import annotations

import random

from notify_helpers import LoopbackReceiver, Stage, loopback  # noqa: F401
from test_notify_delivery import T0, S, alert, hook

from sentinel.incidents import Database, IncidentTracker
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.models import TimelineEvent, TimelineKind
from sentinel.respond.notify import actfirst
from sentinel.respond.notify.cause import CAUSE, CAUSE_CATEGORY, cause_text, lead_with_cause
from sentinel.respond.notify.dispatcher import Dispatcher, DispatchSettings
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.routing import Route
from sentinel.respond.notify.sender import RetryPolicy, Sender

OOM = {"signature": "tpu_hbm_resource_exhausted", "category": "hbm_oom",
       "excerpt": ["INFO 11-21 10:00:04 engine step 1042",
                   "ERROR 11-21 10:00:05 EngineCore encountered a fatal error",
                   "RuntimeError: RESOURCE_EXHAUSTED: Attempting to allocate 2.1G in HBM",
                   "INFO shutting down"]}


def _stage(db: Database, lb: LoopbackReceiver) -> Stage:
    outbox = Outbox()
    route = Route("0", "oncall", (), ("target",), 0, 5 * 60 * S, 4 * 3600 * S, False, ())
    settings = DispatchSettings(route, annotations=actfirst.with_act_first(None))
    return Stage(IncidentTracker(db, outbox=outbox), Dispatcher(db, outbox, settings),
                 Sender(db, {"oncall": hook(lb)}, outbox, RetryPolicy(1_000, 60_000, 3600_000),
                        rng=random.Random(1)))


def _excerpt(db: Database, incident_id: int) -> None:
    # As incidents/evidence.py attaches a crash line's excerpt to the target's incident.
    with db.session() as s:
        s.add(TimelineEvent(incident_id=incident_id, at=ms_to_dt(T0), kind=TimelineKind.LOG_EXCERPT,
                            message="hbm_oom tpu_hbm_resource_exhausted in vllm.log line 9",
                            data=OOM))


def _paged(lb: LoopbackReceiver) -> list[dict[str, str]]:
    return [a["annotations"] for r in lb.accepted()  # type: ignore[index]
            for a in r.json()["alerts"] if a["status"] == "firing"]


def test_a_target_down_page_leads_with_the_crash_that_caused_it(
        incident_db: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    st = _stage(incident_db, loopback)
    (n,) = st.tracker.process([alert("gpu-a", "VLLMTargetDown", severity="critical")], T0)
    _excerpt(incident_db, n.incident_id)
    st.tick(T0)
    (ann,) = _paged(loopback)
    cause = "hbm_oom: RuntimeError: RESOURCE_EXHAUSTED: Attempting to allocate 2.1G in HBM"
    assert ann[CAUSE] == cause
    assert ann["summary"] == f"Cause: {cause}. VLLMTargetDown on gpu-a"
    assert CAUSE_CATEGORY not in ann  # internal: dropped before the receiver sees it
    assert ann[actfirst.EXCERPT].startswith("INFO 11-21 10:00:04")  # the excerpt still rides


def test_the_crash_alerts_own_page_is_left_as_it_is(
        incident_db: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    st = _stage(incident_db, loopback)
    crash = alert("gpu-a", "VLLMHBMOutOfMemory", severity="critical", category="hbm_oom")
    (n,) = st.tracker.process([crash], T0)
    _excerpt(incident_db, n.incident_id)
    st.tick(T0)
    (ann,) = _paged(loopback)
    assert ann["summary"] == "VLLMHBMOutOfMemory on gpu-a" and CAUSE not in ann


def test_without_an_excerpt_a_symptom_page_is_unchanged(
        incident_db: Database, loopback: LoopbackReceiver) -> None:  # noqa: F811
    st = _stage(incident_db, loopback)
    st.tracker.process([alert("gpu-a", "VLLMHealthCheckFailing", severity="critical")], T0)
    st.tick(T0)
    (ann,) = _paged(loopback)
    assert ann["summary"] == "VLLMHealthCheckFailing on gpu-a" and CAUSE not in ann


def test_the_cause_line_is_the_last_error_bounded() -> None:
    assert cause_text(None) == "" and cause_text({"excerpt": []}) == ""
    assert cause_text({"category": "engine_dead", "excerpt": ["a", "b"]}) == "engine_dead: b"
    long = cause_text({"category": "x", "excerpt": ["ValueError: " + "y" * 500]})
    assert len(long) == len("x: ") + 160 and long.endswith("…")
    # Applied once: an update re-annotating a page's alert does not say it twice.
    once = lead_with_cause({"summary": "down", CAUSE: "c", CAUSE_CATEGORY: "k"},
                           {"alertname": "VLLMTargetDown"})
    assert lead_with_cause({**once, CAUSE_CATEGORY: "k"}, {})["summary"] == "Cause: c. down"
