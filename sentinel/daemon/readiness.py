"""Whether a restored alert's data has answered since start (issue 10: a restart is invisible).

After a restart the rule engine holds its restored alerts: one that is
absent from an evaluation's results is not resolved until its data source
has answered, i.e. its target was scraped successfully at or before the
evaluation's timestamp. An evaluation that runs before the first scrape
landed, or while the target stays unreachable (it raises target-down
instead), resolves nothing by absence. Alerts that name no scrape target
(an `absent()` rule, a TPU or fleet-wide rule) wait for the first round: every
target scraped once, successfully or not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from sentinel.incidents.tracker import group_key
from sentinel.model import Alert


class DataReadiness:
    """First successful scrape of each target since start, and the end of the first round."""

    def __init__(self, targets: Iterable[str], clock_ms: Callable[[], int] | None = None
                 ) -> None:
        self._targets = frozenset(targets)
        # The daemon's clock (the one evaluations are timed by): when a scrape's samples
        # were stored. None: the scrape's own timestamp stands for it.
        self._clock_ms = clock_ms
        self._answered: dict[str, int] = {}
        self._up: dict[str, bool] = {}  # each target's last scrape: did it answer?
        self._attempted: set[str] = set()
        self._round_ms: int | None = None if self._targets else 0
        self._lock = threading.Lock()

    def scraped(self, target: str, up: bool, at_ms: int) -> None:
        """A scrape of `target` timed `at_ms` finished and was stored (`up`: it answered).

        Evaluations are ready for the target from the moment its samples were stored (the
        clock now), not from the scrape's timestamp: an evaluation timed between the two
        may have queried before they were, and taken their absence for a resolution
        (issue 48: a slow target's alert resolved 5 s after a restart, then paged again).
        """
        self._up[target] = up  # one dict store: atomic under the GIL
        if up and target in self._answered and self._round_ms is not None:
            return  # the common case, without the lock
        stored = at_ms if self._clock_ms is None else max(at_ms, self._clock_ms())
        with self._lock:
            if up:
                self._answered.setdefault(target, stored)
            self._attempted.add(target)
            if self._round_ms is None and self._attempted >= self._targets:
                self._round_ms = stored

    def serving(self, target: str) -> bool | None:
        """Whether the target serves (its last scrape answered; False before the first since
        start); None for a target Sentinel does not scrape. An incident of a failure of the
        target ends only when this is True (incidents/ending.py)."""
        if target not in self._targets:
            return None
        return self._up.get(target, False)

    def ready(self, alert: Alert, now_ms: int) -> bool:
        """Whether `alert`'s absence at `now_ms` may count."""
        target = group_key(alert).target
        if target in self._targets:
            at = self._answered.get(target)
            return at is not None and now_ms >= at
        return self._round_ms is not None and now_ms >= self._round_ms
