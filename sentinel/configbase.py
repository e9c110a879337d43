"""Building blocks of the config models: the strict base class, durations, URL checks.

Shared by `sentinel.configmodel` (the top-level config) and
`sentinel.configsources` (per-target log, TPU and cache sources).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

from sentinel.durations import parse_duration


def problem(message: str, *path: str | int) -> PydanticCustomError:
    """A validation error placed at `path` below the model that raises it."""
    return PydanticCustomError("config", "{message}", {"message": message, "path": path})


def _duration_ms(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise PydanticCustomError("config", "{message}", {"message": "expected a duration like 5s"})
    try:
        return parse_duration(str(value))
    except ValueError as exc:
        raise PydanticCustomError("config", "{message}", {"message": str(exc)}) from None


def _positive(ms: int) -> int:
    if ms <= 0:
        raise PydanticCustomError("config", "{message}", {"message": "must be greater than 0"})
    return ms


Duration = Annotated[int, BeforeValidator(_duration_ms)]
PositiveDuration = Annotated[int, BeforeValidator(_duration_ms), AfterValidator(_positive)]


def http_url(value: str, *, what: str = "URL") -> str:
    """Check an http(s) URL without ever echoing it (it may hold a token)."""
    try:
        split = urlsplit(value)
        split.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        raise problem(f"not a valid {what}") from None
    if split.scheme not in ("http", "https"):
        raise problem(f"{what} must start with http:// or https://")
    if not split.hostname:
        raise problem(f"{what} has no host")
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)
