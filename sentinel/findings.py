"""A pre-flight finding: where, which key, what is wrong and the fix (kinds and the type).

Its own module so the checks (`sentinel.preflight`, `preflightchecks`, `notifycheck`)
share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

ERROR = "error"  # the configuration itself is wrong: fix the file
UNAVAILABLE = "unavailable"  # the configuration is fine, this host cannot run it now
WARNING = "warning"  # `run` starts, but probably not as meant
NOTE = "note"  # said at start, so nobody has to guess (the bundled rules)


@dataclass(frozen=True, slots=True)
class Finding:
    """One line of the pre-flight: where, which key, what is wrong and the fix."""

    kind: str  # ERROR, UNAVAILABLE, WARNING or NOTE
    key: str  # the dotted key, `--listen` when the flag set it, "" for a rule file's own line
    message: str
    where: str = ""  # FILE:LINE of the key, or a rule file's FILE:LINE:COL

    def __str__(self) -> str:
        return ": ".join(p for p in (self.where, self.key, self.message) if p)
