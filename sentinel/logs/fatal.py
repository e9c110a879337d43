"""Did the process survive this traceback? The catch-all's decision, from what follows.

A traceback that no signature claims is a crash only when the exception ended
the process. The log says which, a few lines later:

- *teardown* after it (the server shutting down, `Killed`, `Aborted`, leaked
  shared memory reported at exit, a new `Fatal Python error`) means it died;
- a *sign of life* (an INFO/DEBUG record from the same process, an access-log
  line answered 2xx) means it carried on: a handled, logged exception;
- anything else (warnings, other processes' lines, blank lines) is neutral, and
  the classifier keeps waiting, for a bounded number of lines or, on a quiet
  stream, a bounded time (`SETTLE_MS`).

When the wait ends without an answer, the traceback's *shape* decides: a
traceback Python's default hook printed (no log level before it) ends the
process unless it came from a thread, a callback or an ASGI request, which
the process survives; a traceback logged by a logger was caught by code that
carries on (a tool parser failing on one response), unless it is logged at
CRITICAL, its message says the process is going down ("fatal", "died"), or
the process is vLLM's engine core or one of its workers, whose loops log an
exception only on their way out.
Stopping on purpose (`KeyboardInterrupt`, `SystemExit`, a cancelled task) is
never a crash.

This is what keeps "handled exceptions the process survives produce nothing"
true without a list of every handled exception.
"""

from __future__ import annotations

import re
from enum import Enum

DECIDE_LINES = 30  # neutral lines to wait after a traceback before deciding by its shape
SETTLE_MS = 1_000  # on a quiet stream, how long an undecided traceback waits for more lines


class Verdict(Enum):
    """What a line after a traceback says about the process that raised it."""

    FATAL = "fatal"
    SURVIVED = "survived"
    NEUTRAL = "neutral"


_TEARDOWN = re.compile(
    r"[Ss]hutting down|[Ss]hutdown (?:complete|the|of)|Application shutdown|"
    r"Finished server process|Waiting for application shutdown|"
    r"\b[Tt]erminating|\b[Tt]erminated|\b[Ee]xiting\b|\bexited\b|\bdied\b|"
    r"(?:^|\W)Killed\s*$|Aborted|core dumped|Segmentation fault|Fatal Python error|"
    r"leaked shared_memory|leaked semaphore|resource_tracker|"
    r"process group has NOT been destroyed|Stopping (?:the )?(?:server|engine|worker)"
)
_LEVEL = re.compile(
    r"(?:^|[\s)\]])(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?=[\s:\]])"
    r"|(?:^|[\s)\]])([DIWEF])\d{4} \d\d:\d\d"
)
_ACCESS_OK = re.compile(r'" [23]\d\d\b')  # uvicorn/gunicorn access log: ... "POST /x HTTP/1.1" 200
_PROCESS = re.compile(r"\(([A-Za-z_][\w-]*(?: rank=\d+)? pid=\d+)\)")
_BENIGN = re.compile(
    r"(?:^|[\s\])])(?:[\w.]+\.)?(?:KeyboardInterrupt|SystemExit|CancelledError|GeneratorExit)\b"
)
# What precedes a traceback the process survives by design.
_SURVIVABLE_CONTEXT = re.compile(
    r"Exception in thread|Exception ignored|Task exception was never retrieved|"
    r"Exception in callback|Exception in ASGI application|Error in atexit|"
    r"Error in sys\.excepthook|Unhandled exception in (?:event|the event) loop"
)
_FATAL_MESSAGE = re.compile(
    r"[Ff]atal|FATAL|[Cc]rash|\bdied\b|\bdead\b|[Aa]bort|\b[Tt]erminat|\b[Ee]xiting"
)
# vLLM's processes that do not survive an exception they log: the engine core
# (EngineCore_DP0), its workers (VllmWorker-1, Worker_TP0, WorkerProc), Ray's worker wrappers.
_ENGINE_PROCESS = re.compile(r"(?:EngineCore|[A-Za-z]*Worker|WorkerProc|RayWorkerWrapper)")
_LEVEL_PREFIX_CHARS = 120  # a level word later than this is message text, not the record's level


def level_of(line: str) -> str | None:
    """The log level of a record (INFO, ERROR, ...; glog letters mapped), or None."""
    m = _LEVEL.search(line, 0, _LEVEL_PREFIX_CHARS)
    if m is None:
        return None
    if m.group(1):
        return "WARNING" if m.group(1) == "WARN" else m.group(1)
    return {"D": "DEBUG", "I": "INFO", "W": "WARNING", "E": "ERROR", "F": "FATAL"}[m.group(2)]


def process_of(line: str) -> str | None:
    """The `(Name pid=N)` prefix vLLM and Ray put on a process's lines, or None."""
    m = _PROCESS.search(line, 0, _LEVEL_PREFIX_CHARS)
    return m.group(1) if m else None


def after_traceback(line: str, process: str | None) -> Verdict:
    """What `line`, seen after a traceback of `process`, says about that process."""
    if _TEARDOWN.search(line):
        return Verdict.FATAL
    if _ACCESS_OK.search(line):
        return Verdict.SURVIVED
    level = level_of(line)
    if level in ("INFO", "DEBUG") and (process is None or process_of(line) in (None, process)):
        # A bare line from another process is not evidence about this one; with
        # no process prefix on either side the stream is one process.
        if process is None or process_of(line) == process:
            return Verdict.SURVIVED
    return Verdict.NEUTRAL


def is_benign(exception: str) -> bool:
    """Whether the exception line is a deliberate stop (Ctrl+C, sys.exit, a cancelled task)."""
    return _BENIGN.search(exception) is not None


# Exceptions that report another process's death or a torn-down channel: the
# fallout of an engine death, never its cause.
_FALLOUT = re.compile(
    r"\b(?:EOFError|BrokenPipeError|ConnectionResetError|ConnectionRefusedError|ZMQError|"
    r"ClosedResourceError|EndOfStream|ProcessLookupError|TimeoutError|CancelledError|"
    r"EngineGenerateError|EngineDeadError|ChildProcessError)\b|"
    r"RuntimeError: (?:cancelled|Engine|Worker|Cannot send)"
)


def is_cause(exception: str) -> bool:
    """Whether an exception line can be the root cause of the engine's death (not its fallout)."""
    return not is_benign(exception) and _FALLOUT.search(exception) is None


def by_shape(header: str, before: str, exception: str, process: str | None = None) -> bool:
    """Whether an undecided traceback ended its process, judged by how it was printed.

    `header` is the `Traceback (most recent call last):` line, `before` the line
    preceding it, `exception` the final exception line, `process` the
    `(Name pid=N)` prefix when there is one.
    """
    body = exception
    marker = header.find("Traceback (most recent call last):")
    if marker > 0 and exception.startswith(header[:marker]):
        body = exception[marker:]  # the exception without the log prefix
    if is_benign(body):
        return False
    prefix = header[:marker] if marker > 0 else ""
    if _SURVIVABLE_CONTEXT.search(before) or _SURVIVABLE_CONTEXT.search(prefix):
        return False
    level = level_of(prefix) if prefix else None
    if level is None and not prefix and level_of(before) in ("ERROR", "WARNING"):
        # logger.exception() without a per-line formatter: the record's message line
        # (with its level) and then the traceback, unprefixed. The record decides.
        prefix, level = before, level_of(before)
        process = process if process is not None else process_of(before)
    if level is None:
        return True  # printed by Python's default hook: the exception ended the program
    if level in ("CRITICAL", "FATAL"):
        return True
    if level == "ERROR" and process is not None and _ENGINE_PROCESS.match(process):
        # vLLM's engine core and workers log an exception on their way out (their
        # busy loops do not carry on after one), and no sign of life followed it.
        return True
    # Logged by code that caught the exception (logger.exception): the process
    # carries on unless the message itself says it is going down.
    return level == "ERROR" and bool(_FATAL_MESSAGE.search(prefix) or _FATAL_MESSAGE.search(before))
