"""Log stage: sources → crash-signature classifier → counter series in the store + events in the DB.

Each match increments `sentinel_log_signature_matches_total{target, signature,
category}`, so ordinary Prometheus rules alert on log evidence, and the event
with its excerpt is stored, where incidents of the target pick it up.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

from sentinel.collect.logsource import LogSource
from sentinel.incidents.db import Database
from sentinel.incidents.log_events import record_log_events
from sentinel.logs.classify import DEFAULT_CATCH_ALL, Classifier
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

    def poll(self, source: LogSource, now_ms: int) -> list[LogEvent]:
        """One poll of one source; never raises for bad lines (the classifier bounds them)."""
        entries = source.poll(now_ms)
        classifier = self._classifiers.setdefault(source.name, Classifier(self.signatures))
        events = classifier.feed_many(entries, now_ms=now_ms)
        if not entries:
            # The stream went quiet: emit what waited for context-after lines (a
            # traceback whose fate is undecided waits SETTLE_MS from its last
            # line, which an empty poll does not move).
            events += classifier.flush(now_ms)
        events = [dataclasses.replace(e, excerpt=_REDACTOR.lines(e.excerpt)) for e in events]
        # Where the source stands is saved with the events it led to, and only when it moved.
        cursors = self._moved(getattr(source, "cursor_key", None), getattr(source, "cursor", None))
        positions = self._moved(getattr(source, "position_key", None),
                                getattr(source, "position", None))
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

    def _moved(self, key: str | None, checkpoint: Any) -> dict[str, Any]:
        if key is None or checkpoint is None or self._recorded.get(key) == checkpoint:
            return {}
        return {key: checkpoint}

    def _count(self, target: str, events: Iterable[LogEvent], now_ms: int) -> None:
        counts = self._counts.get(target)
        if counts is None:
            # Every signature's counter starts at 0, so the first match is an
            # increase that `increase(...[5m]) > 0` sees, as with labelled
            # counters that a client library initialises.
            counts = self._counts[target] = {
                (s.name, s.category): 0 for s in self.signatures.signatures}
            # The classifier's catch-all counts too, even when the signature file has none.
            counts.setdefault((DEFAULT_CATCH_ALL.name, DEFAULT_CATCH_ALL.category), 0)
        for event in events:
            key = (event.signature, event.category)
            counts[key] = counts.get(key, 0) + 1
        for (signature, category), n in counts.items():
            self.store.add(labels_of({"__name__": MATCHES, "target": target,
                                      "signature": signature, "category": category}),
                           now_ms, float(n))

    def close(self, sources: Iterable[LogSource]) -> None:
        """Close every source (files, subprocesses, clients)."""
        for source in sources:
            try:
                source.close()
            except Exception:
                log.exception("closing log source %s failed", source.name)
