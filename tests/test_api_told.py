"""`api/told.py` alone: who was told and who was not, read off timeline lines (issue 48).
The same fold feeds the incident page's "Told" box and the list's marker; here its
rules, and a property over random timelines."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel.api import told


def _e(at: str, kind: str, data: dict[str, object], message: str = "m") -> dict[str, object]:
    return {"at": at, "kind": kind, "message": message, "data": data}


def test_a_held_page_then_a_fix_reads_as_held_then_fixed_told() -> None:
    timeline = [
        _e("t1", "note", {"act_first": "waiting", "grace_ms": 120_000}, "page held up to 120s"),
        _e("t2", "note", {"act_first": "fixed"}, "not paged: fixed by Sentinel"),
        _e("t3", "notification_sent", {"receiver": "chat", "kind": "fixed"}),
    ]
    s = told.summary(timeline)
    assert [(n["reason"], n["ended_at"]) for n in s["not_told"]] == [
        ("held while Sentinel acts", "t2"), ("fixed", None)]
    assert s["marker"] == {"text": "fixed, told chat", "at": "t3", "told": True}
    # Still held: the marker says so.
    assert told.summary(timeline[:1])["marker"]["text"] == "not paged: held while Sentinel acts"


def test_a_failed_delivery_is_not_told_until_a_retry_succeeds() -> None:
    failed = _e("t1", "notification_failed", {"receiver": "pager", "kind": "firing"})
    assert told.summary([failed])["not_told"][0]["reason"] == "delivery failed"
    ok = told.summary([failed, _e("t2", "notification_sent",
                                  {"receiver": "pager", "kind": "firing"})])
    assert ok["not_told"] == [] and ok["marker"]["text"] == "paged pager"


def test_a_mute_window_that_ended_is_shown_with_its_end() -> None:
    s = told.summary([
        _e("t1", "note", {"receiver": "oncall", "route_muted": "mute time interval nights"}),
        _e("t2", "note", {"receiver": "oncall", "route_muted": None}),
        _e("t3", "notification_sent", {"receiver": "oncall", "kind": "firing"})])
    assert [(n["reason"], n["ended_at"]) for n in s["not_told"]] == [
        ("muted by a time interval", "t2")]
    assert s["marker"]["text"] == "paged oncall"


RECEIVERS = ("pager", "chat")
_EVENTS = st.one_of(
    st.builds(lambda r, k: ("notification_sent", {"receiver": r, "kind": k}),
              st.sampled_from(RECEIVERS), st.sampled_from(sorted(told.WHAT))),
    st.builds(lambda r, k: ("notification_failed", {"receiver": r, "kind": k}),
              st.sampled_from(RECEIVERS), st.sampled_from(sorted(told.WHAT))),
    st.builds(lambda r, m: ("note", {"receiver": r, "muted": m, "inhibited_by": m}),
              st.sampled_from(RECEIVERS), st.sampled_from([None, "inhibited by X"])),
    st.builds(lambda r, m: ("note", {"receiver": r, "route_muted": m}),
              st.sampled_from(RECEIVERS), st.sampled_from([None, "mute time interval n"])),
    st.builds(lambda a: ("note", {"act_first": a}),
              st.sampled_from(["waiting", "paged", "fixed"])),
    st.just(("note", {"joined": "VLLMTargetDown"})),
    st.just(("note", {"unrelated": True})),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_EVENTS, max_size=30))
def test_the_summary_agrees_with_the_lines_it_reads(events: list) -> None:
    timeline = [_e(f"t{i:03d}", kind, data) for i, (kind, data) in enumerate(events)]
    s = told.summary(timeline)
    sent = {(d["receiver"], told.WHAT[d["kind"]]): f"t{i:03d}"
            for i, (k, d) in reversed(list(enumerate(events))) if k == "notification_sent"}
    # Everyone told is listed, with the first time they got each kind, and nobody else.
    assert {(t["receiver"], g["what"]): g["at"] for t in s["told"] for g in t["got"]} == sent
    # A delivery that failed is "not told" only while no retry of it succeeded.
    for n in s["not_told"]:
        if n["reason"] == "delivery failed":
            assert (n["receiver"], n["what"]) not in sent
        assert n["ended_at"] is None or n["ended_at"] > n["at"]
    # At most one reason of each slot is in force per receiver (a mute that ended is closed).
    live = [(n["receiver"], n["reason"]) for n in s["not_told"]
            if n["ended_at"] is None and n["reason"] not in ("joined", "fixed", "delivery failed")]
    assert len(live) == len(set(live))
    # The marker says paged exactly when someone got a page (or a fix was told), and
    # otherwise names a reason from the not-told list.
    m = s["marker"]
    pages = any(w in ("page", "fixed") for _, w in sent)
    if pages:
        assert m is not None and m["told"]
    elif s["not_told"]:
        assert m is not None and not m["told"] and m["text"].removeprefix("not paged: ") in {
            n["reason"] for n in s["not_told"]}
    else:
        assert m is None
