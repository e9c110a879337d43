"""The targets a fleet is counted over: each one's labels, and each label group's size.

The fraction rule (incidents/fleet.py: 20 % of a pool) needs the size of the
group a failure is in. Configured targets are known at start; targets found in
Kubernetes come and go while the daemon runs, so discovery's hooks (and a reload's
target changes) update this as they happen: `add` and `remove` are O(1), so a
relist of 5,000 pods is 5,000 small steps, not 5,000 recounts of the fleet.

Written by the discovery and reload threads, read by the evaluation thread: the
writes hold a lock; a read is one `dict.get`, whole under the GIL.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from sentinel.model import Labels


class FleetTargets:
    """Each target's labels, and how many targets each `group_by` group has."""

    def __init__(self, group_by: tuple[str, ...],
                 labels: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self.group_by = group_by
        self._labels: dict[str, Mapping[str, str]] = {}
        self._sizes: dict[Labels, int] = {}
        self._lock = threading.Lock()
        for name, own in (labels or {}).items():
            self.add(name, own)

    def group(self, labels: Mapping[str, str]) -> Labels:
        """The group of a target with these labels (`()` when the fleet is one group)."""
        return tuple((k, labels.get(k, "")) for k in self.group_by)

    def add(self, name: str, labels: Mapping[str, str]) -> None:
        """A target came (or its labels changed: it moves to its new group)."""
        with self._lock:
            self._drop(name)
            self._labels[name] = dict(labels)
            g = self.group(labels)
            self._sizes[g] = self._sizes.get(g, 0) + 1

    def remove(self, name: str) -> None:
        """A target went away (a pod deleted, a target removed from the file)."""
        with self._lock:
            self._drop(name)

    def _drop(self, name: str) -> None:
        old = self._labels.pop(name, None)
        if old is None:
            return
        g = self.group(old)
        left = self._sizes.get(g, 0) - 1
        if left > 0:
            self._sizes[g] = left
        else:
            self._sizes.pop(g, None)

    def labels(self, name: str) -> Mapping[str, str]:
        """A target's labels ({} when unknown)."""
        return self._labels.get(name, {})

    def size(self, group: Labels) -> int:
        """How many targets a group has now (0: unknown)."""
        return self._sizes.get(group, 0)

    def snapshot(self) -> dict[str, Mapping[str, str]]:
        """Every target's labels (a copy): a fresh correlator starts from it."""
        with self._lock:
            return dict(self._labels)
