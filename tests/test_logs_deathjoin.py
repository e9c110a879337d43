"""One death, one event across a target's streams (issue 51): a pod's record joins the log's event.

Kubernetes' record of a container that ended (`pod_termination_lines` from the
pod's JSON, as discovery renders it) comes on its own stream; the server's
crash comes on the log stream Sentinel follows (a file here). In either
order, within the window, they are one event, named by the log (it says the
cause); a record with no crash near it is an event of its own, released
after the hold. The property test states the join's invariant over random
interleavings; the table rows name each reason.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from fakes.kube_server import pod
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from test_kubernetes_deaths import terminated

from sentinel.collect.logfile import LogFileSource
from sentinel.collect.pod_deaths import PodDeathSource
from sentinel.daemon.logwatch import LogWatch
from sentinel.incidents.db import Database
from sentinel.incidents.models import LogEventRow
from sentinel.logs import load_signature_file
from sentinel.logs.deathjoin import HOLD_MS, WINDOW_MS, DeathJoin, Reason
from sentinel.logs.deaths import pod_termination_lines
from sentinel.logs.fatal import SETTLE_MS
from sentinel.model import LogEvent
from sentinel.store import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_765_000_000_000
CRASH = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
         "GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is free."]


def _event(source: str, severity: str = "critical", t_ms: int = T0) -> LogEvent:
    return LogEvent(target="t", source=source, signature="s", category="c", severity=severity,
                    t_ms=t_ms, line_no=None, excerpt=("x",))


# -- the pure join: one row per reason, then the invariant ---------------------------------

def test_a_record_after_a_crash_event_is_that_crash_s_death() -> None:
    join = DeathJoin()
    assert join.admit("t", [_event("file")], False, T0).events == [_event("file")]
    out = join.admit("t", [_event("pod")], True, T0 + WINDOW_MS)
    assert out.events == [] and out.decided == [(_event("pod"), Reason.SAME_DEATH)]


def test_a_record_before_the_crash_event_waits_for_it_and_is_dropped() -> None:
    join = DeathJoin()
    assert join.admit("t", [_event("pod")], True, T0).events == []
    assert join.held("t") == 1
    out = join.admit("t", [_event("file")], False, T0 + HOLD_MS - 1)
    assert out.events == [_event("file")]
    assert out.decided == [(_event("pod"), Reason.CAUSE_FOLLOWED)]


def test_a_record_with_no_crash_near_it_is_released_after_the_hold() -> None:
    join = DeathJoin()
    join.admit("t", [_event("file")], False, T0)  # long before: another death
    assert join.admit("t", [_event("pod")], True, T0 + WINDOW_MS + 1).events == []
    assert join.admit("t", [], True, T0 + WINDOW_MS + 1 + HOLD_MS).events == []
    out = join.admit("t", [], True, T0 + WINDOW_MS + 2 + HOLD_MS)
    assert out.events == [_event("pod")] and out.decided == [(_event("pod"), Reason.NO_CAUSE)]


def test_a_warning_is_no_cause_and_another_target_is_another_death() -> None:
    join = DeathJoin()
    join.admit("t", [_event("file", severity="warning")], False, T0)
    join.admit("u", [_event("file")], False, T0)
    assert join.admit("t", [_event("pod")], True, T0 + 1).events == []
    assert join.due("t", T0 + 2 + HOLD_MS) == [(_event("pod"), Reason.NO_CAUSE)]


_STEP = st.tuples(st.sampled_from(["crash", "warning", "record", "tick"]),
                  st.integers(min_value=0, max_value=WINDOW_MS + HOLD_MS))


@settings(max_examples=300, deadline=None)
@given(st.lists(_STEP, max_size=30))
def test_every_record_is_decided_once_and_dropped_only_beside_a_crash(
        steps: list[tuple[str, int]]) -> None:
    """Log events pass unchanged; each record is decided exactly once; it is dropped only when a
    crash event came within the window before it or the hold after it, else released."""
    join = DeathJoin()
    now = T0
    crashes: list[int] = []
    records: list[tuple[int, LogEvent]] = []
    decided: dict[int, Reason] = {}
    passed: list[LogEvent] = []
    for i, (kind, gap) in enumerate(steps):
        now += gap
        if kind == "record":
            ev = _event(f"pod-{i}")
            records.append((now, ev))
            out = join.admit("t", [ev], True, now)
        elif kind in ("crash", "warning"):
            ev = _event(f"file-{i}", "critical" if kind == "crash" else "warning")
            crashes += [now] if kind == "crash" else []
            out = join.admit("t", [ev], False, now)
            assert ev in out.events
        else:
            out = join.admit("t", [], False, now)
        passed += [e for e in out.events if e.source.startswith("pod")]
        for ev, reason in out.decided:
            assert id(ev) not in decided
            decided[id(ev)] = reason
    for ev, reason in join.due("t", now + HOLD_MS + 1):
        decided[id(ev)] = reason
        passed.append(ev)
    for at, ev in records:
        reason = decided[id(ev)]
        near = any(at - WINDOW_MS <= c <= at + HOLD_MS for c in crashes)
        assert (reason is Reason.NO_CAUSE) == (not near), (at, crashes, reason)
        assert (ev in passed) == (reason is Reason.NO_CAUSE)


# -- LogWatch with the real sources: a file and a pod's status ---------------------------

def _pod_record() -> str:
    old = pod("vllm-0", namespace="inference")
    terminated(old, 0, 1, "Error", "2026-12-07T09:00:00Z")
    new = copy.deepcopy(old)
    terminated(new, 1, 1, "Error", "2026-12-07T10:00:05Z")
    (line,) = pod_termination_lines(old, new)
    return line


def _setup(tmp_path: Path) -> tuple[LogWatch, LogFileSource, PodDeathSource, Database]:
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    db.upgrade()
    watch = LogWatch(MemoryStore(), db, load_signature_file(ROOT / "rules" / "signatures.yaml"))
    log = tmp_path / "vllm.log"
    log.write_text("INFO serving\n")
    return watch, LogFileSource("t", log, start_at_end=True), PodDeathSource("t"), db


def _events(db: Database) -> list[tuple[str, str]]:
    with db.session() as s:
        return [(r.signature, r.source) for r in
                s.scalars(select(LogEventRow).order_by(LogEventRow.id))]


def _write(source: LogFileSource, lines: list[str]) -> None:
    with open(source.path, "a") as f:
        f.write("".join(f"{line}\n" for line in lines))


def _poll(watch: LogWatch, source: Any, now: int) -> None:
    watch.poll(source, now)
    watch.poll(source, now)  # a quiet poll closes what the first one read


def test_the_log_first_then_the_pod_s_record_is_one_event(tmp_path: Path) -> None:
    watch, log, pods, db = _setup(tmp_path)
    _poll(watch, log, T0)
    _write(log, CRASH)
    _poll(watch, log, T0 + 100)
    pods.push(_pod_record(), T0 + 2_000)
    _poll(watch, pods, T0 + 2_000)
    _poll(watch, pods, T0 + 2_000 + HOLD_MS * 2)
    assert _events(db) == [("cuda_oom", log.name)]
    db.dispose()


def _record_held(watch: LogWatch, pods: PodDeathSource, at: int) -> int:
    """Push a pod's record at `at` and poll until the classifier emits it (a bare death waits
    SETTLE_MS for a cause on its own stream): the time it was handed to the join."""
    pods.push(_pod_record(), at)
    watch.poll(pods, at)
    emitted = at + SETTLE_MS
    watch.poll(pods, emitted)
    assert watch.joins.held("t") == 1
    return emitted


def test_the_pod_s_record_first_then_the_log_is_one_event(tmp_path: Path) -> None:
    watch, log, pods, db = _setup(tmp_path)
    _poll(watch, log, T0)
    emitted = _record_held(watch, pods, T0 + 100)
    assert _events(db) == []  # held: the log's words may still come
    _write(log, CRASH)
    _poll(watch, log, emitted + HOLD_MS)  # its last millisecond
    assert watch.joins.held("t") == 0
    _poll(watch, pods, emitted + HOLD_MS * 2)
    assert _events(db) == [("cuda_oom", log.name)]
    db.dispose()


def test_a_pod_death_no_log_names_is_an_event_after_the_hold(tmp_path: Path) -> None:
    watch, log, pods, db = _setup(tmp_path)
    _poll(watch, log, T0)
    emitted = _record_held(watch, pods, T0 + 100)
    _poll(watch, log, emitted + 1_000)  # the log says nothing
    _poll(watch, pods, emitted + HOLD_MS)
    assert _events(db) == []  # the hold's last millisecond: a crash could still drop it
    _poll(watch, pods, emitted + HOLD_MS + 1)
    assert _events(db) == [("unclassified_crash", pods.name)]
    db.dispose()
