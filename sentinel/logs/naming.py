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

from sentinel.logs import families, phase
from sentinel.logs.groups import SYMPTOM_PRIORITY, Group, Hit
from sentinel.logs.signatures import Signature, SignatureSet
from sentinel.model import LogEntry

GENERIC_PRIORITY = 30  # hits at or below this (and the catch-all) may be renamed by family
START_FAILED = "engine_start_failed"  # what a death while loading is named (phase.py)
HANG = "engine_hang_watchdog"  # a hang keeps its name in either phase
# Crash reports by their shape (an oops, a debugger's backtrace, a runtime's error
# status): symptom-level, so a cause names them, and a start-up failure while loading.
SHAPES = frozenset({"native_crash_report", "accelerator_status_error"})


class Namer:
    """Names closed groups against one signature set (see the module doc)."""

    def __init__(self, signatures: SignatureSet, catch_all: Signature) -> None:
        self.signatures = signatures
        self.catch_all = catch_all

    def name(self, group: Group) -> tuple[Signature, Hit, LogEntry, int | None, int]:
        """(signature, naming hit, entry, line number, lines before the group to show)."""
        best = self.naming_hit(group)
        sig, entry, line_no, back = self.by_family(group, best)
        return sig, best, entry, line_no, back

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

    def by_family(self, group: Group, best: Hit) -> tuple[Signature, LogEntry, int | None, int]:
        """Rename a generically named event after the family of its first cause.

        Only the catch-all and the generic symptoms (engine dead, engine or
        shard failed to start: priority at most GENERIC_PRIORITY) are renamed;
        the engine-hang family renames only the catch-all (a timeout while
        starting is a start-up failure). See `families.py`. The lines before
        the group are read as far back as the ring holds (FAMILY_LOOKBACK):
        the last value says how many of them the excerpt must show (0: only
        the signature's own context).
        """
        sig = best.signature
        if sig.priority > GENERIC_PRIORITY and sig is not self.catch_all:
            return sig, best.entry, best.line_no, 0
        before = group.before
        ahead = [i for i, b in enumerate(before) if families.is_error_line(b)]
        texts = [before[i] for i in ahead] + [text for text, _, _ in group.statements]
        found = families.find(texts, " ".join(group.where))
        if found is None or (found.family.symptom and sig is not self.catch_all):
            return self.by_phase(group, best), best.entry, best.line_no, 0
        named = self.signatures.by_name(found.family.signature)
        if named is None or named is sig:
            return sig, best.entry, best.line_no, 0
        if found.index >= len(ahead):
            _, entry, line_no = group.statements[found.index - len(ahead)]
            return named, entry, line_no, 0
        # a line before the group: counted back from the group's first line
        entry, first = group.first if group.first is not None else (best.entry, None)
        back = len(before) - ahead[found.index]
        return named, entry, None if first is None else first - back, back

    def by_phase(self, group: Group, best: Hit) -> Signature:
        """An engine's death while the server was still loading is a start-up failure.

        Only a death (category engine_dead, a symptom, or a crash report known by
        its shape: `SHAPES`) with no cause is asked;
        the lines before the group and its own first lines say the phase
        (`phase.py`). The engine-hang watchdog keeps its name.
        """
        sig = best.signature
        death = sig.category == "engine_dead" or sig.name in SHAPES
        if not death or sig.priority > SYMPTOM_PRIORITY \
                or sig.name == HANG or not phase.loading([*group.before, *group.head]):
            return sig
        start = self.signatures.by_name(START_FAILED)
        return start if start is not None else sig
