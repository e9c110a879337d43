"""Which name a closed group of crash lines gets: the root cause, its family, its phase.

`classify.py` assembles a group of lines (`groups.Group`) and its hits; once
the group closes, `Namer.name` decides the signature the event carries:

- the hit of the root cause, not its symptoms (`naming_hit`): causes outrank
  symptoms by priority, and when only symptoms matched, the first exception
  no signature knows is their cause (the catch-all at that line);
- a generic name (the catch-all, an engine's death) is renamed after the
  family of the earliest cause in the group and the lines before it
  (`families.py`);
- with no cause at all, a death while the server was still loading is a
  start-up failure (`phase.py`).
"""

from __future__ import annotations

import re

from sentinel.logs import families, phase
from sentinel.logs.groups import SYMPTOM_PRIORITY, Group, Hit
from sentinel.logs.signatures import Signature, SignatureSet
from sentinel.model import LogEntry

GENERIC_PRIORITY = 30  # hits at or below this (and the catch-all) may be renamed by family
START_FAILED = "engine_start_failed"  # what a death while loading is named (phase.py)
HANG = "engine_hang_watchdog"  # a hang keeps its name in either phase
# Crash reports by their shape (an oops, a debugger's backtrace, a runtime's error
# status, Ascend's runtime records): symptom-level, so a cause names them, and a
# start-up failure while loading.
SHAPES = frozenset({"native_crash_report", "accelerator_status_error", "npu_runtime_error"})
NATIVE = "native_crash"
# Names that device memory refused in the same window outranks (`Namer.memory_cause`).
MEMORY_OUTRANKS = frozenset({"compile_failure", "other"})
_SCRATCH = re.compile(r"(?i:memory space (?:vmem|smem|sram|semaphore)|\b[vs]mem capacity)")
# A C++ exception nobody caught: the native runtime's words for what a Python traceback
# that ends its process says (an error raised on the start-up path, a download refused),
# not a fault. Such a native death is named like the catch-all: by family, then by phase.
_UNCAUGHT = re.compile(r"terminate called (?:after throwing|without an active exception)|"
                       r"terminating due to uncaught exception")


class Namer:
    """Names closed groups against one signature set (see the module doc)."""

    def __init__(self, signatures: SignatureSet, catch_all: Signature) -> None:
        self.signatures = signatures
        self.catch_all = catch_all

    def name(self, group: Group) -> tuple[Signature, Hit, LogEntry, int | None, int]:
        """(signature, naming hit, entry, line number, lines before the group to show)."""
        best = self.naming_hit(group)
        # the lines both steps read, only when one of them needs them (every event
        # closes here: a crash storm's hundreds per second)
        texts = self._texts(group) if self._generic(best) \
            or best.signature.category in MEMORY_OUTRANKS else None
        sig, entry, line_no, back = self.by_family(group, best, texts)
        if sig.category in MEMORY_OUTRANKS:
            found = self.memory_cause(group, best, texts)
            if found is not None:
                return (found[0], best, *found[1:])
        return sig, best, entry, line_no, back

    def memory_cause(self, group: Group, best: Hit,
                     texts: tuple[list[int], list[str]] | None = None,
                     ) -> tuple[Signature, LogEntry, int | None, int] | None:
        """Device memory refused before what names the event: the cause of it.

        A kernel compiler that fails for lack of device memory, a runtime that
        aborts after its allocator's refusal (Metal's "Insufficient Memory", a
        backend compiler's "lack of device memory"): the memory is the cause,
        the compile failure or the fault its symptom (issue 51, fourth round).
        Only a refusal at or before the naming hit's line counts (a context
        that cannot be allocated after its shaders failed to compile is the
        compile failure's fallout), and not on-chip scratch memory (a TPU
        kernel's vmem or smem that does not fit is the compiler's limit).
        """
        ahead, lines = texts if texts is not None else self._texts(group)
        for i, text in enumerate(lines):
            fam = families.device_memory(text)
            if fam is None or _SCRATCH.search(text):
                continue
            if i >= len(ahead) and not _not_after(group.statements[i - len(ahead)], best):
                return None
            named = self.signatures.by_name(fam.signature)
            return None if named is None else (named, *self._locate(group, best, ahead, i))
        return None

    @staticmethod
    def _texts(group: Group) -> tuple[list[int], list[str]]:
        """The error lines before the group (their indexes) and then its statements."""
        before = group.before
        ahead = [i for i, b in enumerate(before) if families.is_error_line(b)]
        return ahead, [before[i] for i in ahead] + [text for text, _, _ in group.statements]

    @staticmethod
    def _locate(group: Group, best: Hit, ahead: list[int],
                index: int) -> tuple[LogEntry, int | None, int]:
        """Entry, line number and lines back to show for the `index`-th of `_texts`."""
        if index >= len(ahead):
            _, entry, line_no = group.statements[index - len(ahead)]
            return entry, line_no, 0
        # a line before the group: counted back from the group's first line
        entry, first = group.first if group.first is not None else (best.entry, None)
        back = len(group.before) - ahead[index]
        return entry, None if first is None else first - back, back

    def naming_hit(self, group: Group) -> Hit:
        """The hit that names the event: the root cause, not its symptoms.

        Root causes outrank symptoms by priority; among equals the first hit
        names the event. When only symptoms (engine dead, priority at most
        SYMPTOM_PRIORITY) matched, an exception in the excerpt that no
        signature knows (an assertion in the scheduler, an error in a kernel
        library) is their cause: the catch-all names the event there.
        """
        best = max(group.hits, key=lambda h: h.signature.priority)
        if best.signature.priority > SYMPTOM_PRIORITY or best.cause:
            return best
        found = next((h for h in group.hits if h.cause), None)
        if found is None and group.cause is not None:
            found = Hit(self.catch_all, *group.cause, cause=True)
        return found or best

    def by_family(self, group: Group, best: Hit,
                  texts: tuple[list[int], list[str]] | None = None,
                  ) -> tuple[Signature, LogEntry, int | None, int]:
        """Rename a generically named event after the family of its first cause.

        Only the catch-all, the generic symptoms (engine dead, engine or shard
        failed to start: priority at most GENERIC_PRIORITY) and an uncaught C++
        exception are renamed; the engine-hang family renames only the catch-all
        (a timeout while starting is a start-up failure). See `families.py`. The
        lines before the group are read as far back as the ring holds
        (FAMILY_LOOKBACK): the last value says how many of them the excerpt must
        show (0: only the signature's own context).
        """
        sig = best.signature
        if not self._generic(best):
            return sig, best.entry, best.line_no, 0
        ahead, lines = texts if texts is not None else self._texts(group)
        found = families.find(lines, " ".join(group.where))
        if found is None or (found.family.symptom and sig is not self.catch_all
                             and not uncaught(best)):
            return self.by_phase(group, best), best.entry, best.line_no, 0
        named = self.signatures.by_name(found.family.signature)
        if named is None or named is sig:
            return sig, best.entry, best.line_no, 0
        return (named, *self._locate(group, best, ahead, found.index))

    def by_phase(self, group: Group, best: Hit) -> Signature:
        """A death with no cause while the server was still loading is a start-up failure.

        A death is an engine's (category engine_dead, a symptom), a crash report
        known by its shape (`SHAPES`), the catch-all (a supervisor's exit status,
        a kill, a Python exception no family knows: issue 51's fourth round, "no
        request was ever served") or an uncaught C++ exception. A native fault
        (a signal, a device fault) is a cause of its own and keeps its name. The
        lines before the group and its own first lines say the phase (`phase.py`).
        The engine-hang watchdog keeps its name.
        """
        sig = best.signature
        death = sig.category == "engine_dead" or sig.name in SHAPES \
            or sig is self.catch_all or uncaught(best)
        if not death or (sig.priority > SYMPTOM_PRIORITY and not uncaught(best)) \
                or sig.name == HANG or not phase.loading([*group.before, *group.head]):
            return sig
        start = self.signatures.by_name(START_FAILED)
        return start if start is not None else sig

    def _generic(self, best: Hit) -> bool:
        """Whether the naming hit is generic enough for the family layer to rename."""
        sig = best.signature
        return sig.priority <= GENERIC_PRIORITY or sig is self.catch_all or uncaught(best)


def _not_after(statement: tuple[str, LogEntry, int | None], best: Hit) -> bool:
    """Whether a statement of the group came at or before the naming hit's line."""
    _, entry, line_no = statement
    if line_no is not None and best.line_no is not None:
        return line_no <= best.line_no
    return entry.t_ms <= best.entry.t_ms


def uncaught(hit: Hit) -> bool:
    """Whether a hit is a native runtime's uncaught C++ exception (see `_UNCAUGHT`)."""
    return hit.signature.name == NATIVE and _UNCAUGHT.search(hit.entry.text) is not None
