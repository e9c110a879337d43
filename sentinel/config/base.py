"""Building blocks of the config models: the strict base class, durations, URL checks.

Shared by `sentinel.config.model` (the top-level config) and
`sentinel.config.sources` (per-target log, TPU and cache sources).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

from sentinel.config.durations import parse_duration
from sentinel.secrets import read_secret_file


def problem(message: str, *path: str | int) -> PydanticCustomError:
    """A validation error placed at `path` below the model that raises it."""
    return PydanticCustomError("config", "{message}", {"message": message, "path": path})


def unreadable(path: Path, exc: OSError) -> str:
    """Why a file the config names cannot be read, and the fix (as the user running Sentinel)."""
    import os
    import pwd

    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = f"uid {os.geteuid()}"
    fix = (f"make it readable by user {user}" if isinstance(exc, PermissionError) else
           "create it, or fix the path (a relative path starts at the config file's folder)")
    return f"cannot read {path} as user {user}: {exc.strerror or exc}: {fix}"


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


_WithKey = TypeVar("_WithKey", bound=BaseModel)


def with_key_from_file(model: _WithKey, context: dict[str, Any] | None) -> _WithKey:
    """`model` with `api_key` read from `api_key_file` (relative to the config's folder).

    One of the two may be set; an unreadable file is an error on `api_key_file`.
    """
    key_file = getattr(model, "api_key_file", None)
    if key_file is None:
        return model
    if getattr(model, "api_key", ""):
        raise problem("set either api_key or api_key_file, not both", "api_key_file")
    path = Path(key_file)
    if not path.is_absolute():
        path = Path((context or {}).get("config_dir", ".")) / path
    try:
        key = read_secret_file(path)
    except OSError as exc:
        raise problem(unreadable(path, exc), "api_key_file") from None
    return model.model_copy(update={"api_key": key})
