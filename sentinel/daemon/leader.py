"""One leader among several Sentinels sharing one PostgreSQL (issue 16).

The lease is a row of `ha_leases` (migration 0009): `holder`, `epoch` (the
fencing token) and `expires_at`, computed with the *database's* clock
(`clock_timestamp()`), so hosts whose clocks disagree still agree on expiry.

- A standby reads the row (no lock) and, once `expires_at` has passed, takes
  it with one conditional statement (`INSERT … ON CONFLICT DO UPDATE … WHERE
  expires_at <= clock_timestamp()`), which bumps the epoch. Two standbys
  racing get one winner: the row lock serialises them and the loser's WHERE
  is false on the new version.
- The leader renews every third of the lease with a conditional UPDATE
  (`holder`, `epoch` unchanged and not yet expired; rowcount 1). A renewal
  that fails, or no renewal before the local deadline, steps it down.
- The local deadline is `monotonic() before the statement + lease`: the
  database computed its expiry later than that instant, so the leader stops
  believing in its lease before the database lets anyone else take it.
  CLOCK_MONOTONIC runs on while the process is stopped (SIGSTOP) or starved,
  so a woken leader knows at once that its lease may be gone.

Fencing: every transaction of the leader's work (incidents and timeline,
notify dispatch and delivery claims, remediation claims, diagnosis records)
opens with `fence()`: `SELECT … FROM ha_leases WHERE holder, epoch, expires_at >
clock_timestamp() FOR SHARE`. The share lock keeps the row from changing until
that transaction ends, so a takeover (an UPDATE of the row) is ordered after
every transaction the old epoch committed, and a transaction of an old epoch
that starts after a takeover finds no row and rolls back (`NotLeader`). A leader
stopped *inside* such a transaction (SIGSTOP, a network stall) would hold the
share lock forever; `SET LOCAL idle_in_transaction_session_timeout` makes the
server end that session (rolling its work back) after a third of a lease.

What fencing cannot cover is a call to the outside world (a webhook POST, a
command) after the claim committed: those check `is_leader()` (the local
deadline) just before they start, which leaves only the instant between that
check and the call itself.

A takeover (`on_elected`) that raises hands the lease back and is retried with
backoff (a lease, doubling to `TAKEOVER_BACKOFF_CAP_S`), logged once with its
traceback and summarised while it repeats, counted in
`sentinel_ha_takeover_failures_total`, and reported by `takeover_trouble()`
(/healthz: a daemon that cannot lead while no one leads is unhealthy) and
`describe()` (/readyz). Meanwhile the lease is only looked at.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge
from sqlalchemy import text
from sqlalchemy.orm import Session

from sentinel.backoff import exponential
from sentinel.incidents.db import Database
from sentinel.quietlog import QuietFailure

log = logging.getLogger(__name__)

_ACQUIRE = text(
    "INSERT INTO ha_leases (name, holder, epoch, acquired_at, expires_at) "
    "VALUES (:name, :holder, 1, clock_timestamp(), "
    "        clock_timestamp() + :lease_ms * interval '1 millisecond') "
    "ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, epoch = ha_leases.epoch + 1, "
    "  acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at "
    "WHERE ha_leases.expires_at <= clock_timestamp() "
    "RETURNING epoch")
_RENEW = text(
    "UPDATE ha_leases SET expires_at = clock_timestamp() + :lease_ms * interval '1 millisecond' "
    "WHERE name = :name AND holder = :holder AND epoch = :epoch "
    "AND expires_at > clock_timestamp()")
_RELEASE = text(
    "UPDATE ha_leases SET expires_at = clock_timestamp() "
    "WHERE name = :name AND holder = :holder AND epoch = :epoch")
_PEEK = text(
    "SELECT holder, epoch, EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000 "
    "FROM ha_leases WHERE name = :name")
_FENCE = text(
    "SELECT epoch FROM ha_leases WHERE name = :name AND holder = :holder AND epoch = :epoch "
    "AND expires_at > clock_timestamp() FOR SHARE")

# The longest wait between two tries of a takeover that keeps failing.
TAKEOVER_BACKOFF_CAP_S = 30.0


class NotLeader(Exception):
    """This daemon does not hold the lease (any more): the work is not its to do."""


@dataclass(frozen=True, slots=True)
class Leadership:
    """The lease as this daemon holds it."""

    epoch: int
    since_s: float  # wall clock, for /readyz
    deadline: float  # monotonic: not leader after this unless renewed


class LeaderLease:
    """Holds (or waits for) the leader lease in a thread; fences the leader's transactions."""

    def __init__(self, db: Database, lease_ms: int, name: str, holder: str, *,
                 registry: CollectorRegistry | None = None,
                 on_elected: Callable[[int], None] | None = None,
                 on_demoted: Callable[[], None] | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.db = db
        self.lease_s = lease_ms / 1000
        self.name = name
        self.holder = holder
        self._on_elected = on_elected
        self._on_demoted = on_demoted
        self._mono = monotonic
        self._shared = db.dialect == "postgresql"
        self._state: Leadership | None = None
        self._acting: int | None = None  # the epoch on_elected ran for (lease thread only)
        self._led: int | None = None  # the epoch whose takeover succeeded (for /readyz)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._pinned = threading.local()  # the epoch a piece of work started under
        self._thread: threading.Thread | None = None
        self._failure = QuietFailure(log, "leader lease")
        # A takeover that raised: retried with backoff, logged once (see the module docstring).
        self._takeover_log = QuietFailure(log, "taking over as leader (the lease is handed back)")
        self._takeover_failures = 0  # in a row
        self._takeover_error = ""
        self._backoff_until = 0.0  # monotonic: no takeover before this
        self.other: str | None = None  # the holder seen last, when not us
        self._remaining_ms = 0.0  # what the leader seen last had left of its lease
        self._other_live = False  # whether that leader (self.other) still had time left
        self._gauge = self._epoch_gauge = self._changes = self._takeover_counter = None
        if registry is not None:
            self._gauge = Gauge("sentinel_ha_leader",
                                "1 while this Sentinel holds the leader lease, else 0.",
                                registry=registry)
            self._epoch_gauge = Gauge("sentinel_ha_epoch",
                                      "The lease epoch (fencing token) this Sentinel leads with; "
                                      "0 as a standby.", registry=registry)
            self._changes = Counter("sentinel_ha_leader_changes_total",
                                    "Times this Sentinel became leader or stepped down.",
                                    ["change"], registry=registry)
            for change in ("elected", "stepped_down"):
                self._changes.labels(change)
            self._takeover_counter = Counter(
                "sentinel_ha_takeover_failures_total",
                "Takeovers that failed after the lease was acquired (the lease was handed "
                "back and the takeover is retried with backoff).", registry=registry)

    # -- what others ask ---------------------------------------------------

    def is_leader(self) -> bool:
        """True while the lease is held and its local deadline has not passed."""
        st = self._state
        return st is not None and self._mono() < st.deadline

    @property
    def epoch(self) -> int | None:
        """The epoch this daemon leads with, or None."""
        st = self._state
        return st.epoch if st is not None and self._mono() < st.deadline else None

    def describe(self) -> str:
        """One line for /readyz: leader or standby, and the epoch or who leads."""
        st = self._state
        if st is not None and self._mono() < st.deadline:
            if self._led != st.epoch:  # the lease is held, the takeover not done (or failed)
                return f"ha: taking over (epoch {st.epoch}, holder {self.holder})"
            return f"ha: leader (epoch {st.epoch}, since {st.since_s:.3f}, holder {self.holder})"
        failing = ""
        if self._takeover_failures:
            failing = (f"; takeover failing ({self._takeover_failures} in a row, next try in "
                       f"{max(0.0, self._backoff_until - self._mono()):.1f}s): "
                       f"{self._takeover_error}")
        return f"ha: standby (leader {self.other or 'unknown'}, holder {self.holder}){failing}"

    def takeover_trouble(self) -> str | None:
        """Why this daemon is unhealthy as far as leading goes, or None.

        It is when its takeovers keep failing while no one else leads: the fleet has no
        leader, and only a restart (or a person) can help. While another daemon leads,
        a standby that could not take over is not (yet) a problem for anyone.
        """
        if not self._takeover_failures or self.is_leader() or self.other_leads():
            return None
        return (f"ha: cannot take over as leader ({self._takeover_failures} failed takeovers "
                f"in a row, and no other Sentinel leads): {self._takeover_error}")

    def other_leads(self) -> bool:
        """Whether the lease was seen last held by another Sentinel, with time left."""
        return self.other is not None and self._other_live

    @contextmanager
    def term(self) -> Iterator[int | None]:
        """Pin this thread's fenced transactions to the epoch it starts under.

        Work that began in one term (an evaluation) must not write in the next, even if
        this same daemon leads again by then.
        """
        epoch = self.epoch
        self._pinned.epoch = epoch if epoch is not None else -1  # not leading: refuse all
        try:
            yield epoch
        finally:
            self._pinned.epoch = None

    def fence(self, s: Session) -> None:
        """Open a transaction of the leader's work: raise NotLeader unless the lease is ours.

        The row stays locked FOR SHARE until the transaction ends, so no takeover
        can commit in between (see the module docstring).
        """
        st = self._state
        if st is None or self._mono() >= st.deadline:
            raise NotLeader(f"{self.holder} does not hold the lease {self.name!r}")
        pinned = getattr(self._pinned, "epoch", None)
        if pinned is not None and pinned != st.epoch:
            raise NotLeader(f"work of epoch {pinned} refused in epoch {st.epoch}")
        if not self._shared:
            return
        idle_ms = max(200, int(self.lease_s * 1000 / 3))
        s.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = {idle_ms}"))
        row = s.execute(_FENCE, {"name": self.name, "holder": self.holder,
                                 "epoch": st.epoch}).first()
        if row is None:
            self._lost(st, "the lease moved on")
            raise NotLeader(f"{self.holder} lost the lease {self.name!r} (epoch {st.epoch})")

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> LeaderLease:
        """Try once at once (a lone daemon leads from its first evaluation), then keep at it."""
        self._round()
        self._thread = threading.Thread(target=self._loop, name="sentinel-leader", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop, and hand the lease back so a standby takes over without waiting it out."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        st, self._state = self._state, None
        if st is not None and self._shared:
            try:
                with self.db.session() as s:
                    s.execute(_RELEASE, {"name": self.name, "holder": self.holder,
                                         "epoch": st.epoch})
                log.info("leader lease %r released (epoch %d)", self.name, st.epoch)
            except Exception:
                log.warning("could not release the leader lease; it runs out in %.0fs",
                            self.lease_s, exc_info=True)
        self._set_metrics()

    # -- the loop ----------------------------------------------------------

    def _loop(self) -> None:
        delay = self._next_delay()
        while not self._stop.is_set():
            self._wake.wait(delay)
            self._wake.clear()
            if self._stop.is_set():
                return
            self._round()
            delay = self._next_delay()

    def _round(self) -> None:
        """One renewal, or one look at the lease (and a takeover when it ran out)."""
        try:
            if self._state is not None:
                self._renew(self._state)
            elif self._mono() < self._backoff_until:
                self._peek()  # a takeover failed: only look, until the backoff ends
            elif not self._shared:
                self._elected(1)
            else:
                self._try_acquire()
            self._failure.ok()
        except Exception:
            self._failure.failed()  # database away: the deadline decides, below
        st = self._state
        if st is not None and self._mono() >= st.deadline:
            self._lost(st, "not renewed in time")
        self._settle()

    def _renew(self, st: Leadership) -> None:
        if not self._shared:
            self._state = Leadership(st.epoch, st.since_s, float("inf"))
            return
        t0 = self._mono()
        with self._statement() as s:
            n = s.execute(_RENEW, {"name": self.name, "holder": self.holder, "epoch": st.epoch,
                                   "lease_ms": int(self.lease_s * 1000)}).rowcount  # type: ignore[attr-defined]
        if n == 1:
            if self._state is st:
                self._state = Leadership(st.epoch, st.since_s, t0 + self.lease_s)
        else:
            self._lost(st, "the renewal found the lease taken or run out")

    def _peek(self) -> bool:
        """Look at the lease row; True when someone (perhaps us) holds it with time left."""
        if not self._shared:
            return False
        with self._statement() as s:
            row = s.execute(_PEEK, {"name": self.name}).first()
        if row is None:
            self.other, self._remaining_ms, self._other_live = None, 0.0, False
            return False
        self.other = None if row[0] == self.holder else str(row[0])
        self._remaining_ms = float(row[2])
        self._other_live = self._remaining_ms > 0
        return self._other_live

    def _try_acquire(self) -> None:
        if self._peek():
            return
        t0 = self._mono()
        with self._statement() as s:
            got = s.execute(_ACQUIRE, {"name": self.name, "holder": self.holder,
                                       "lease_ms": int(self.lease_s * 1000)}).first()
        if got is not None:
            self._state = Leadership(int(got[0]), time.time(), t0 + self.lease_s)
            self.other = None

    def _elected(self, epoch: int) -> None:
        self._state = Leadership(epoch, time.time(), float("inf"))

    @contextmanager
    def _statement(self) -> Iterator[Session]:
        # Never wait on a lock for longer than a third of the lease: the deadline rules.
        # Nor hold one: a leader stopped between its renewal's UPDATE and the COMMIT kept
        # the row locked, and the standby's takeover waited 31 s (a stress pass) until
        # something else ended that session; the server now ends it after a third of a lease.
        third_ms = int(self.lease_s * 1000 / 3)
        with self.db.session() as s:
            if self._shared:
                s.execute(text(f"SET LOCAL lock_timeout = {third_ms}"))
                s.execute(text(f"SET LOCAL statement_timeout = {third_ms}"))
                s.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = "
                               f"{max(200, third_ms)}"))
            yield s

    def _lost(self, st: Leadership, why: str) -> None:
        if self._state is st:
            self._state = None
            log.warning("leader lease %r lost (epoch %d): %s; standing by", self.name, st.epoch,
                        why)
            self._wake.set()  # the lease thread calls on_demoted

    def _settle(self) -> None:
        """Run the callbacks for a change of role (always on the lease thread or in start).

        A term is acted on once: lost (perhaps noticed by a fence in another thread) and
        retaken since, this daemon steps down first, so a new epoch always starts with a
        fresh takeover (state restored from the database).
        """
        st = self._state
        if self._acting is not None and (st is None or st.epoch != self._acting):
            self._demote()
        st = self._state
        if st is not None and self._acting is None:
            log.info("leader lease %r acquired (epoch %d) by %s", self.name, st.epoch,
                     self.holder)
            self._acting = st.epoch
            if self._changes is not None:
                self._changes.labels("elected").inc()
            if self._on_elected is not None:
                try:
                    self._on_elected(st.epoch)
                except Exception as exc:
                    self._takeover_failed(exc)
                    self._state = None
                    self._release_quietly(st)
                    self._demote()
                else:
                    self._takeover_ok()
            self._led = st.epoch if self._state is st else None
        self._set_metrics()

    def _takeover_failed(self, exc: Exception) -> None:
        """Count it, log it once, and back off before the next try."""
        self._takeover_failures += 1
        self._takeover_error = f"{type(exc).__name__}: {exc}"[:500]
        wait = exponential(self._takeover_failures, self.lease_s,
                           max(self.lease_s, TAKEOVER_BACKOFF_CAP_S))
        self._backoff_until = self._mono() + wait
        self._other_live = False  # handed back: nobody holds it now
        if self._takeover_counter is not None:
            self._takeover_counter.inc()
        self._takeover_log.failed(exc)

    def _takeover_ok(self) -> None:
        if self._takeover_failures:
            log.info("took over as leader after %d failed takeovers", self._takeover_failures)
        self._takeover_failures, self._takeover_error, self._backoff_until = 0, "", 0.0
        self._takeover_log.ok()

    def _demote(self) -> None:
        self._acting = self._led = None
        if self._changes is not None:
            self._changes.labels("stepped_down").inc()
        if self._on_demoted is not None:
            try:
                self._on_demoted()
            except Exception:
                log.exception("stepping down failed")

    def _release_quietly(self, st: Leadership) -> None:
        if not self._shared:
            return
        try:
            with self.db.session() as s:
                s.execute(_RELEASE, {"name": self.name, "holder": self.holder,
                                     "epoch": st.epoch})
        except Exception:
            log.debug("release failed", exc_info=True)

    def _next_delay(self) -> float:
        st = self._state
        if st is not None:
            return self.lease_s / 3 if self._shared else 3600.0
        remaining = self._remaining_ms / 1000
        self._remaining_ms = 0.0
        backoff = self._backoff_until - self._mono()
        if backoff > 0:  # a takeover failed: the next try waits; keep looking meanwhile
            return max(0.02, min(self.lease_s / 3, backoff + 0.02))
        # Wake just after the leader's lease would run out, but look at least every third.
        return max(0.02, min(self.lease_s / 3, remaining + 0.02))

    def _set_metrics(self) -> None:
        if self._gauge is not None and self._epoch_gauge is not None:
            epoch = self.epoch
            self._gauge.set(1 if epoch is not None else 0)
            self._epoch_gauge.set(epoch or 0)


class FencedDatabase(Database):
    """The same database, whose every session first checks the lease (`LeaderLease.fence`).

    Handed to the stages that only the leader runs: a transaction of a daemon that
    is not (or no longer) the leader raises NotLeader before it writes anything.
    """

    def __init__(self, db: Database, fence: Callable[[Session], None]) -> None:  # noqa: D107
        self.__dict__.update(db.__dict__)  # share the engine and the session factory
        self._fence = fence

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A fenced session in one transaction: committed on success, rolled back on error."""
        with super().session() as s:
            self._fence(s)
            yield s
