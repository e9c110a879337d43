"""ConfigError and ConfigProblem: what every config loader raises (no pydantic, cheap)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One problem: file, 1-based line (None when unknown), dotted key path, message."""

    file: str
    line: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


class ConfigError(Exception):
    """The configuration is invalid; str() lists every problem, one per line."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(map(str, problems)))
