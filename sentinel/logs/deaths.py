"""Structural evidence of a death: records that say a process ended, whoever printed them.

A server's own words name a crash; the records around it say *that* it
died, whatever the server said: the container engine (`docker events`:
`container die ... (exitCode=137, ...)`, `container oom ...`), Kubernetes
(a container's `lastState.terminated`, rendered in `kubectl describe`'s
words), systemd (a unit's result, `Main process exited, code=killed`,
systemd-coredump's `Process N (x) of user 0 dumped core.` and its
`Signal: 11 (SEGV)` summary), the kernel (a `segfault at` or `traps:` line
naming the process, the OOM killer's report and task table) and
supervisors (`exited with code N`, a shell's `Killed`).

These records are signatures like any other (rules/signatures.yaml names
their category); this module says which lines are such records, so the
classifier can keep one crash one event: a record of a death that arrives
shortly after the event its crash already raised (the container engine
reports the exit after the server's last line, the kernel prints "Killed
process" after its task table) is the same death and opens nothing
(`DEDUPE_LINES`), and an event opened by a record shows the last lines
before it (`CONTEXT_BEFORE`), since the record itself says nothing of why.

Across streams (a pod's status is a stream of records only, the server's
output another), `deathjoin.py` keeps the same rule: a record beside a crash
event of the target's other streams is that crash's death.

`docker_event_line` and `pod_termination_lines` render the API objects of
the two sources that have no log line for a death (Docker's event stream,
a pod's container statuses) in their CLIs' own words, so they enter the
target's stream as the records an operator would read.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

# A record within this many lines after an event of the same stream is that
# event's death (the kernel's task table runs to dozens of lines between its
# header and "Killed process"). A later one is a death of its own.
DEDUPE_LINES = 60
DEDUPE_MS = 20_000  # ...and within this long on the entries' clock: a restart takes longer
OOM_KILLED = "host_oom_killed"  # a record of this category names its own cause
# An event a record opens shows this many lines before it (the ring holds 30).
CONTEXT_BEFORE = 30

_RECORD = re.compile(
    # the container engine and Kubernetes (as rendered below, and as their CLIs print)
    r"container (?:die|oom|kill) [0-9a-f]{12,64} \(|Last State: +Terminated|"
    r"Reason: +OOMKilled|\"OOMKilled\": ?true|exited with (?:exit )?code [0-9]|"
    r"Exit Code: +[0-9]|"
    # systemd and systemd-coredump
    r"Main process exited, code=|Failed with result '|killed by the OOM killer|"
    r"of user [0-9]+ dumped core|^ *Signal: [0-9]+ \([A-Z]+\)|terminated abnormally with signal|"
    r"ANOM_ABEND |"
    # the kernel: faults naming the process, the OOM killer's report
    r"segfault at [0-9a-f]+ ip |traps: \S+\[[0-9]+\] |Killed process [0-9]+ \(|"
    r"invoked oom-killer: |oom-kill:constraint=|\] +uid +tgid +total_vm +rss|oom_reaper: |"
    # shells and supervisors
    r"^Killed *$|[0-9]+ Killed  +[A-Za-z./$]|exit status [0-9]+|"
    r"process has terminated: |died, exit code|exitcode[:=] ?-?[0-9]"
)


def is_record(line: str) -> bool:
    """Whether `line` is a structural record of a process's death (see the module doc)."""
    return _RECORD.search(line) is not None


def _stamp(ns: int) -> str:
    """Docker's event time: RFC 3339 with nanoseconds, in UTC."""
    base = datetime.fromtimestamp(ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{ns % 1_000_000_000:09d}Z"


def docker_event_line(event: dict[str, Any]) -> str | None:
    """A container's `die` or `oom` event as `docker events` prints it, or None.

    `2025-03-01T10:00:00.123456789Z container die 3f2a… (exitCode=137, image=x, name=vllm)`:
    time, type, action, the actor's id, its attributes sorted by key. Other
    actions (start, exec, health status) are not deaths.
    """
    action = event.get("Action") or event.get("status")
    if event.get("Type", "container") != "container" or action not in ("die", "oom"):
        return None
    actor = event.get("Actor") or {}
    ident = str(actor.get("ID") or event.get("id") or "")
    attrs = actor.get("Attributes") or {}
    if not isinstance(attrs, dict) or not re.fullmatch(r"[0-9a-f]{12,64}", ident):
        return None
    ns = event.get("timeNano")
    if not isinstance(ns, int):
        ns = int(event.get("time") or 0) * 1_000_000_000
    inner = ", ".join(f"{k}={attrs[k]}" for k in sorted(attrs))
    return f"{_stamp(ns)} container {action} {ident} ({inner})"


def pod_termination_lines(old: dict[str, Any] | None, new: dict[str, Any],
                          since_s: float | None = None) -> list[str]:
    """One line per container of `new` that died since `old` (a pod's JSON, as the API serves it).

    A death is a `lastState.terminated` whose `finishedAt` (or the restart
    count) moved on from `old`'s: the kubelet restarted the container after
    it ended, with that reason and exit code. A pod seen for the first time
    (`old` None) has none, what ended before Sentinel looked is history,
    unless it ended at or after `since_s` (when Sentinel began watching: a
    death between the daemon's start and discovery's first list is news,
    issue 53). A container that completed
    (exit code 0, reason Completed) did not die. Rendered in `kubectl
    describe`'s words: `pod ns/name container vllm: Last State: Terminated,
    Reason: OOMKilled, Exit Code: 137, Started: ..., Finished: ..., Restart Count: 3`.
    """
    if old is None and since_s is None:
        return []  # first sight: what ended before Sentinel looked is history, not news
    before = {s.get("name"): s for s in _statuses(old)}
    meta = new.get("metadata") or {}
    pod = f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"
    out = []
    for status in _statuses(new):
        term = (status.get("lastState") or {}).get("terminated")
        if not isinstance(term, dict):
            continue
        prev = before.get(status.get("name")) or {}
        prev_term = (prev.get("lastState") or {}).get("terminated") or {}
        if old is None:  # first sight: news only if it ended since Sentinel began watching
            if not _finished_since(term.get("finishedAt"), since_s):
                continue
        elif prev_term.get("finishedAt") == term.get("finishedAt") \
                and prev.get("restartCount") == status.get("restartCount"):
            continue  # seen already
        code = term.get("exitCode")
        if code == 0 or not isinstance(code, int):
            continue
        signal = f", Signal: {term['signal']}" if term.get("signal") else ""
        out.append(
            f"pod {pod} container {status.get('name')}: Last State: Terminated, "
            f"Reason: {term.get('reason') or 'Error'}, Exit Code: {code}{signal}, "
            f"Started: {term.get('startedAt')}, Finished: {term.get('finishedAt')}, "
            f"Restart Count: {status.get('restartCount', 0)}")
    return out


def _finished_since(finished: object, since_s: float | None) -> bool:
    """Whether an RFC 3339 `finishedAt` (whole seconds) is at or after `since_s`'s second."""
    if since_s is None or not isinstance(finished, str):
        return False
    try:
        at = datetime.fromisoformat(finished.replace("Z", "+00:00"))
    except ValueError:
        return False
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.timestamp() >= int(since_s)


def _statuses(pod: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not pod:
        return []
    status = pod.get("status") or {}
    found = [*(status.get("initContainerStatuses") or []),
             *(status.get("containerStatuses") or [])]
    return [s for s in found if isinstance(s, dict)]
