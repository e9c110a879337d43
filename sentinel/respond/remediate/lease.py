"""Leases on running attempts: a Sentinel that dies mid-remediation never jams the fleet.

A claimed attempt carries its owner (`host:pid:start`, the process start
time in clock ticks from /proc, so a recycled pid is not mistaken for the
owner) and `lease_until`. While the action runs, a `Heartbeat` renews the
lease every third of a lease period; every daemon's reaper fails
running attempts whose lease ran out, or whose owner on this host is gone
(then at once, without waiting for the lease). A reaped attempt that never
began to act (no `acting_at`: its owner lost the lead or died between the
claim and the action) is withdrawn: nothing ran, so nothing is counted, and
the guards decide again. Any other reaped attempt is a failed attempt: the
target's failures in a row, backoff and breaker count it (as `finish`
would), its hour budget already counted it when it was claimed, and its
concurrency slot is free. So the slot of a dead owner is free within
one lease period, while the daemon runs, not only at its next start (issue 10).

An owner's own attempts are left alone while this process still runs them
(`RUNNING`: from the claim to the end of `Engine.execute`). One whose run ended
without recording its outcome (the HA lease was lost meanwhile, and the fenced
database refused the finish) is reaped like a dead owner's once its lease ran out:
else, when the same daemon leads again, the target stays `in_progress` for ever.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from sqlalchemy import or_, select, update

from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models_remediation import AttemptStatus, RemediationAttempt
from sentinel.quietlog import QuietFailure
from sentinel.respond.remediate.guards import Limits, after_outcome
from sentinel.respond.remediate.state import _state_of, _target_row, add_event, withdraw

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reaped:
    """An attempt failed because its owner stopped holding it."""

    attempt_id: int
    incident_id: int
    target: str
    owner: str
    why: str
    withdrawn: bool = False  # it never acted: removed, not counted as a failure
    adopted: bool = False  # it acted: this Sentinel owns it now and checks its effect


class RunningAttempts:
    """The attempts this process claimed and is still running (thread safe)."""

    def __init__(self) -> None:  # noqa: D107
        self._ids: set[int] = set()
        self._lock = threading.Lock()

    def add(self, attempt_id: int) -> None:
        """Claimed here: alive until `discard`, whatever its lease says."""
        with self._lock:
            self._ids.add(attempt_id)

    def discard(self, attempt_id: int) -> None:
        """Its run ended (recorded or not)."""
        with self._lock:
            self._ids.discard(attempt_id)

    def __contains__(self, attempt_id: object) -> bool:
        with self._lock:
            return attempt_id in self._ids


RUNNING = RunningAttempts()


def _start_ticks(pid: int) -> str | None:
    """The process start time in clock ticks since boot (/proc/PID/stat field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


@cache
def owner_id() -> str:
    """This process as an attempt owner: host, pid and start time."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or '?'}"


def owner_gone(owner: str) -> bool:
    """Whether `owner` is a process on this host that no longer exists (pid gone or reused)."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3:
        return False
    host, pid, start = parts
    if host != socket.gethostname() or not pid.isdigit() or start == "?":
        return False  # another host: only its lease can tell
    return _start_ticks(int(pid)) != start


def renew(db: Database, attempt_id: int, now_ms: int, lease_ms: int) -> bool:
    """Extend the lease of a running attempt; False when it is no longer running."""
    with db.session() as s:
        result = s.execute(update(RemediationAttempt).where(
            RemediationAttempt.id == attempt_id,
            RemediationAttempt.status == AttemptStatus.RUNNING.value,
        ).values(lease_until=ms_to_dt(now_ms + lease_ms)))
        return bool(getattr(result, "rowcount", 0))


class Heartbeat:
    """Renews one attempt's lease every third of a lease period while its action runs."""

    def __init__(self, db: Database, attempt_id: int, lease_ms: int,
                 clock_ms: Callable[[], int]) -> None:
        self._db, self._id, self._lease_ms, self._clock_ms = db, attempt_id, lease_ms, clock_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"sentinel-lease-{attempt_id}")
        self._failure = QuietFailure(log, f"renewing the lease of attempt #{attempt_id}")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self._lease_ms / 3000):
            try:
                renew(self._db, self._id, self._clock_ms(), self._lease_ms)
            except Exception:  # the database may be away: the next beat tries again
                self._failure.failed()
            else:
                self._failure.ok()


def reap(db: Database, owner: str, now_ms: int, limits: Limits,
         adopt: Callable[[RemediationAttempt], bool] | None = None, lease_ms: int = 30_000
         ) -> list[Reaped]:
    """Fail running attempts of other owners whose lease ran out or who are gone.

    An attempt that acted and that `adopt` accepts is not failed: this owner takes it
    over (a fresh lease), so its target stays in progress, and the caller checks what
    the action did before anything is redone (adopt.py, issue 48).
    """
    now = ms_to_dt(now_ms)
    out: list[Reaped] = []
    with db.session() as s:
        rows = s.scalars(select(RemediationAttempt).where(
            RemediationAttempt.status == AttemptStatus.RUNNING.value,
            RemediationAttempt.owner.is_not(None),
            or_(RemediationAttempt.owner != owner, RemediationAttempt.lease_until < now),
        ).with_for_update(skip_locked=True)).all()
        for r in rows:
            assert r.owner is not None
            expired = r.lease_until is not None and r.lease_until < now
            if r.owner == owner:
                if r.id in RUNNING or not expired:
                    continue  # ours and running: the heartbeat was late (database away)
                why = "its run here ended without recording an outcome"
            else:
                gone = owner_gone(r.owner)
                if not (expired or gone):
                    continue
                why = (f"its owner {r.owner} is gone" if gone
                       else f"its owner {r.owner} stopped renewing its lease")
            if r.acting_at is None:  # nothing ran: the guards decide again
                withdraw(s, r, now_ms, why)
                out.append(Reaped(r.id, r.incident_id, r.target, r.owner, why, withdrawn=True))
                continue
            if adopt is not None and adopt(r):
                previous = r.owner
                r.owner, r.lease_until = owner, ms_to_dt(now_ms + lease_ms)
                add_event(s, r.incident_id, now_ms,
                          f"attempt #{r.id} was left running: {why}; checking what it did "
                          "before anything is redone", {"phase": "adopted", "attempt": r.id,
                                                        "owner": previous, "target": r.target})
                out.append(Reaped(r.id, r.incident_id, r.target, previous, why, adopted=True))
                continue
            r.status, r.finished_at, r.lease_until = AttemptStatus.FAILED, now, None
            r.detail = f"abandoned: {why}; outcome unknown"
            target = _target_row(s, r.target, now)
            after = after_outcome(_state_of(target), False, now_ms, limits)
            target.consecutive_failures = after.consecutive_failures
            target.last_failure_at = now
            if after.breaker_opened_ms is not None and target.breaker_opened_at is None:
                target.breaker_opened_at = now
            add_event(s, r.incident_id, now_ms, f"attempt #{r.id} abandoned: {why}",
                      {"phase": "outcome", "attempt": r.id, "ok": False, "abandoned": True,
                       "owner": r.owner})
            out.append(Reaped(r.id, r.incident_id, r.target, r.owner, why))
    return out
