"""TPU restart hygiene shared by the warm-restart actions: the stale libtpu lock file, busy chips.

libtpu takes a lock file (`libtpu_lockfile` in the system temporary
directory) when a process opens the TPU and removes it when the process exits
cleanly. A process that crashed or was killed leaves it behind, and the next
server on the host then refuses to start ("The TPU is already in use by
process with pid N", "libtpu.so already in use by another process") although
nothing holds the chip. So a restart removes the file once the old process is
gone and before starting again, and says so in its outcome (the incident's
timeline). A start that still dies on a busy chip (the driver releasing it a
moment after the process exits) is retried with backoff until the deadline.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from sentinel.backoff import exponential
from sentinel.config.remediation import DEFAULT_LIBTPU_LOCKFILE

__all__ = ["DEFAULT_LIBTPU_LOCKFILE", "backoff_delays", "chip_busy", "clear_stale_lockfile",
           "describe"]
# What a process that found the chip held prints or leaves as its error.
BUSY_MARKERS = ("already in use", "Device or resource busy", "libtpu_lockfile")
BACKOFF_INITIAL_S = 0.1
BACKOFF_MAX_S = 2.0


def clear_stale_lockfile(path: str | None) -> dict[str, Any]:
    """Remove the lock file at `path` (the old process is gone); what happened, for the audit.

    Returns `{}` when disabled (`path` None or empty), else the path and
    `lockfile_removed` (True, or False when there was none), plus
    `lockfile_error` when it exists but could not be removed.
    """
    if not path:
        return {}
    data: dict[str, Any] = {"libtpu_lockfile": path, "lockfile_removed": False}
    try:
        os.unlink(path)
        data["lockfile_removed"] = True
    except FileNotFoundError:
        pass
    except OSError as exc:  # a directory, no permission: reported, the start goes ahead
        data["lockfile_error"] = f"{type(exc).__name__}: {exc.strerror or exc}"
    return data


def describe(data: dict[str, Any]) -> str:
    """A phrase for the outcome's one-line detail ("; removed stale /tmp/libtpu_lockfile")."""
    if data.get("lockfile_removed"):
        return f"; removed stale {data['libtpu_lockfile']}"
    if data.get("lockfile_error"):
        return f"; could not remove {data['libtpu_lockfile']} ({data['lockfile_error']})"
    return ""


def chip_busy(error: str) -> bool:
    """Whether a failed start's error says the TPU was held (retryable), by its wording."""
    return any(marker in error for marker in BUSY_MARKERS)


def backoff_delays(initial_s: float = BACKOFF_INITIAL_S,
                   max_s: float = BACKOFF_MAX_S) -> Iterator[float]:
    """Delays between retried starts: initial, doubling, capped at max_s (an endless iterator)."""
    failures = 1
    while True:
        yield exponential(failures, initial_s, max_s)
        failures += 1
