"""Log stage: sources → crash-signature classifier → counter series in the store + events in the DB.

Each match increments `sentinel_log_signature_matches_total{target, signature,
category}`, so ordinary Prometheus rules alert on log evidence, and the event
with its excerpt is stored, where incidents of the target pick it up.

The counters live in memory, so a restarted daemon (or a new HA leader, whose
store never counted them) would see no increase and resolve a crash alert
that still fires (issue 33): `restore` rebuilds each target's counter series
from the events on record before the first evaluation.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

from sentinel.collect.logsource import LogSource
from sentinel.incidents.db import Database
from sentinel.incidents.log_events import record_log_events, signature_counts_since
from sentinel.logs.classify import DEFAULT_CATCH_ALL, Classifier
from sentinel.logs.deathjoin import DeathJoin, Reason
from sentinel.logs.signatures import SignatureSet
from sentinel.model import LogEvent, labels_of
from sentinel.secretpatterns import PromptRedactor
from sentinel.store import MemoryStore

log = logging.getLogger(__name__)

# Crash logs carry other people's credentials (tokens in download errors,
# keys in environment dumps): excerpts are redacted before they are stored.
_REDACTOR = PromptRedactor()

MATCHES = "sentinel_log_signature_matches_total"


class LogWatch:
    """Polls log sources, classifies their lines, counts and records what matched."""

    def __init__(self, store: MemoryStore, db: Database, signatures: SignatureSet) -> None:
        self.store = store
        self.db = db
        self.signatures = signatures
        self._classifiers: dict[str, Classifier] = {}  # one per stream: context is per stream
        self._counts: dict[str, dict[tuple[str, str], int]] = {}  # target → (sig, cat) → n
        self._recorded: dict[str, object] = {}  # checkpoint key → the cursor/position on record
        self._counted: dict[str, int] = {}  # target → when its counters were last written
        self.joins = DeathJoin()  # records of deaths joined to the crash events of other streams
        # collect/accelerators.py: vLLM's start-up lines say what each target runs on.
        self.accelerators: Any = None
        # collect/coldstart.py: starts, compile lines and serving, per target.
        self.coldstarts: Any = None

    def poll(self, source: LogSource, now_ms: int) -> list[LogEvent]:
        """One poll of one source; never raises for bad lines (the classifier bounds them)."""
        entries = source.poll(now_ms)
        if self.accelerators is not None:
            self.accelerators.saw(entries)
        if self.coldstarts is not None:
            self.coldstarts.saw(entries)
        classifier = self._classifiers.setdefault(source.name, Classifier(self.signatures))
        events = classifier.feed_many(entries, now_ms=now_ms)
        if not entries:
            # The stream went quiet: emit what waited for context-after lines (a
            # traceback whose fate is undecided waits SETTLE_MS from its last
            # line, which an empty poll does not move).
            events += classifier.flush(now_ms)
        events = [dataclasses.replace(e, excerpt=_REDACTOR.lines(e.excerpt)) for e in events]
        # A death seen by a stream of records only (a pod's status) and by the server's own
        # words elsewhere is one event (logs/deathjoin.py): the record may wait for the other.
        joined = self.joins.admit(source.target, events, bool(getattr(source, "structural", False)),
                                  now_ms)
        for record, reason in joined.decided:
            if reason is not Reason.NO_CAUSE:
                log.info("%s: %s in %s is the death of a crash already matched (%s)",
                         record.target, record.signature, record.source, reason.value)
        events = joined.events
        # Where the source stands is saved with the events it led to, and only when it moved.
        cursors = self._moved(getattr(source, "cursor_key", None), self._cursor(source, classifier))
        positions = self._moved(getattr(source, "position_key", None),
                                self._position(source, classifier))
        if events or cursors or positions:
            record_log_events(self.db, events, cursors=cursors, positions=positions,
                              now_ms=now_ms)
            self._recorded.update(cursors)
            self._recorded.update(positions)
        self._count(source.target, events, now_ms)
        for event in events:
            log.warning("%s: %s %s in %s", event.target, event.category, event.signature,
                        event.source)
        return events

    @staticmethod
    def _position(source: LogSource, classifier: Classifier) -> Any:
        """Where a file source stands, or, while an event is still being assembled, the
        position before its first line: its lines are read again after a kill -9."""
        position = getattr(source, "position", None)
        pending = classifier.pending
        position_at = getattr(source, "position_at", None)
        if pending is None or position_at is None:
            return position
        before = position_at(pending)
        return position if before is None else before

    @staticmethod
    def _cursor(source: LogSource, classifier: Classifier) -> Any:
        """Where a cursor source (Docker, journald, Cloud Logging) stands; while an event
        is still being assembled, the cursor before its first line (as `_position`)."""
        cursor = getattr(source, "cursor", None)
        pending = classifier.pending
        cursor_at = getattr(source, "cursor_at", None)
        if pending is None or cursor_at is None:
            return cursor
        before = cursor_at(pending)
        return cursor if before is None else before

    def _moved(self, key: str | None, checkpoint: Any) -> dict[str, Any]:
        if key is None or checkpoint is None or self._recorded.get(key) == checkpoint:
            return {}
        return {key: checkpoint}

    def restore(self, targets: Iterable[str], now_ms: int) -> None:
        """Count, per target, the events on record that this process has not counted.

        Events recorded within the store's retention by an earlier run or
        another leader are replayed into the counter series at the times they
        were counted, each step right after the count before it (so
        `increase(...[w])` sees it for `w` after the event, as if this process
        had polled), in order after what this store holds. Run at start and at
        each HA takeover.
        """
        for target in targets:
            counted = self._counted.get(target)
            since = now_ms - self.store.retention_ms
            found = signature_counts_since(self.db, target,
                                           since if counted is None else max(since, counted))
            counts = self._counts_for(target)
            if counted is None:  # every series exists, at 0, from before the first event
                first = min([t for _, _, t in found] + [now_ms]) - 2
                self._write(target, {k: 0 for k in counts}, first)
            for signature, category, t_ms in found:
                key, series = (signature, category), _series(target, signature, category)
                # The step sits at the event, as when every poll wrote the count: the old
                # value just before it (dropped as out of order if the series is newer).
                self.store.add(series, t_ms - 1, float(counts.get(key, 0)))
                counts[key] = counts.get(key, 0) + 1
                self.store.add(series, t_ms, float(counts[key]))
            self._count(target, (), now_ms)
            if found:
                log.info("%s: %d signature matches on record restored into the counters",
                         target, len(found))

    def _counts_for(self, target: str) -> dict[tuple[str, str], int]:
        counts = self._counts.get(target)
        if counts is None:
            # Every signature's counter starts at 0, so the first match is an
            # increase that `increase(...[5m]) > 0` sees, as with labelled
            # counters that a client library initialises.
            counts = self._counts[target] = {
                (s.name, s.category): 0 for s in self.signatures.signatures}
            # The classifier's catch-all counts too, even when the signature file has none.
            counts.setdefault((DEFAULT_CATCH_ALL.name, DEFAULT_CATCH_ALL.category), 0)
        return counts

    def _count(self, target: str, events: Iterable[LogEvent], now_ms: int) -> None:
        counts = self._counts_for(target)
        for event in events:
            key = (event.signature, event.category)
            counts[key] = counts.get(key, 0) + 1
        self._write(target, counts, now_ms)
        self._counted[target] = now_ms

    def _write(self, target: str, counts: dict[tuple[str, str], int], t_ms: int) -> None:
        for (signature, category), n in counts.items():
            self.store.add(_series(target, signature, category), t_ms, float(n))

    def close(self, sources: Iterable[LogSource]) -> None:
        """Close every source (files, subprocesses, clients)."""
        for source in sources:
            try:
                source.close()
            except Exception:
                log.exception("closing log source %s failed", source.name)


def _series(target: str, signature: str, category: str) -> tuple[tuple[str, str], ...]:
    return labels_of({"__name__": MATCHES, "target": target, "signature": signature,
                      "category": category})
