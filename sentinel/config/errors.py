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


def load_error_lines(exc: Exception, path: str) -> list[str]:
    """A config that does not load (ConfigError, OSError) as lines, one a problem.

    Every command prints these for a config it cannot load, so `check config`
    and `run` say the same (`error: FILE:LINE: KEY: message`).
    """
    if isinstance(exc, ConfigError):
        return [f"error: {p}" for p in exc.problems]
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return [f"error: {path}: cannot read the config file ({reason}): check the path given "
            "to -c/--config"]


def missing_env_message(name: str) -> str:
    """An unset `${VAR}`, and where to set it."""
    return (f"environment variable {name} is not set: set it where Sentinel starts "
            "(systemd: EnvironmentFile=/etc/sentinel/sentinel.env; docker: -e "
            f"{name}; Kubernetes: the Secret)")
