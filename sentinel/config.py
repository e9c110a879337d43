"""Sentinel's configuration: one YAML file, validated strictly, every problem at once.

`load_config(path)` reads the file keeping each key's line (`yamlpos`),
expands `${VAR}` from the environment, validates with pydantic models that
forbid unknown keys, and raises one `ConfigError` listing every problem as
`FILE:LINE: key.path: message`. Durations are Prometheus durations in YAML
and integer milliseconds in Python (`scrape_interval` → `scrape_interval_ms`).
Secrets (webhook URLs, headers, the database password) never appear in
messages; `Config.secrets()` feeds the `Redactor`.
"""

from __future__ import annotations

import difflib
import glob
import re
import socket
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from sentinel.durations import format_duration, parse_duration
from sentinel.secrets import (
    MissingEnvVar,
    Redactor,
    env_refs,
    expand_env,
    read_secret_file,
    safe_url,
    url_secret_parts,
)
from sentinel.yamlpos import Path as YamlPath
from sentinel.yamlpos import YamlSyntaxError, load_positioned

DEFAULT_DATABASE = "sqlite:///sentinel.db"
DEFAULT_LISTEN = "127.0.0.1:9465"
DEFAULT_INTERVAL_MS = 5_000
DEFAULT_TIMEOUT_MS = 4_000
DEFAULT_RETENTION_MS = 15 * 60_000
DEFAULT_WEBHOOK_TIMEOUT_MS = 10_000

_NAME = r"^[a-zA-Z0-9_.-]+$"
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_GLOB_CHARS = re.compile(r"[*?\[]")


def _problem(message: str, *path: str | int) -> PydanticCustomError:
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


def _http_url(value: str, *, what: str = "URL") -> str:
    """Check an http(s) URL without ever echoing it (it may hold a token)."""
    try:
        split = urlsplit(value)
        split.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        raise _problem(f"not a valid {what}") from None
    if split.scheme not in ("http", "https"):
        raise _problem(f"{what} must start with http:// or https://")
    if not split.hostname:
        raise _problem(f"{what} has no host")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)


class WebhookConfig(_Strict):
    """A generic webhook receiving Alertmanager's JSON payload (version 4)."""

    url: str = Field("", repr=False)  # secret: tokens live in webhook URLs
    url_file: str | None = None
    timeout_ms: PositiveDuration = Field(DEFAULT_WEBHOOK_TIMEOUT_MS, alias="timeout")
    send_resolved: bool = True
    headers: dict[str, str] = Field(default_factory=dict, repr=False)

    @model_validator(mode="before")
    @classmethod
    def _read_url_file(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        has_url, url_file = bool(data.get("url")), data.get("url_file")
        if has_url and url_file is not None:
            raise _problem("set either url or url_file, not both", "url_file")
        if url_file is None:
            if not has_url:
                raise _problem("url or url_file is required", "url")
            return data
        if not isinstance(url_file, str):
            return data  # the field's type check reports it
        path = Path(url_file)
        if not path.is_absolute():
            path = Path((info.context or {}).get("config_dir", ".")) / path
        try:
            content = read_secret_file(path)
        except OSError as exc:
            raise _problem(f"cannot read {path}: {exc.strerror}", "url_file") from None
        return {**data, "url": content}

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        return _http_url(v, what="webhook URL")

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not _HEADER_NAME.match(name):
                raise _problem("not a valid HTTP header name", name)
            if "\n" in value or "\r" in value:
                raise _problem("header values must not contain newlines", name)
        return v


class ReceiverConfig(_Strict):
    """A named destination for notifications; exactly one kind (today: webhook)."""

    name: str = Field(pattern=_NAME)
    webhook: WebhookConfig | None = None

    @model_validator(mode="after")
    def _has_kind(self) -> ReceiverConfig:
        if self.webhook is None:
            raise _problem("receiver has no kind: add a webhook: section")
        return self


class TargetConfig(_Strict):
    """One vLLM server to scrape. Intervals are inherited from the global ones when unset."""

    name: str = Field(pattern=_NAME)
    url: str
    metrics_path: str = "/metrics"
    scrape_interval_ms: PositiveDuration = Field(alias="scrape_interval")
    scrape_timeout_ms: PositiveDuration = Field(alias="scrape_timeout")
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        _http_url(v, what="target URL")
        if urlsplit(v).query or urlsplit(v).fragment:
            raise _problem("target URL must not have a query or fragment")
        return v

    @field_validator("metrics_path")
    @classmethod
    def _check_path(cls, v: str) -> str:
        if not v.startswith("/"):
            raise _problem("must start with /")
        return v

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not _LABEL_NAME.match(name):
                raise _problem("not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*)", name)
            if name.startswith("__"):
                raise _problem("label names starting with __ are reserved", name)
        return v

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> TargetConfig:
        if self.scrape_timeout_ms > self.scrape_interval_ms:
            raise _problem(_timeout_message(self.scrape_timeout_ms, self.scrape_interval_ms),
                           "scrape_timeout")
        return self

    @property
    def metrics_url(self) -> str:
        """The URL to scrape: url + metrics_path."""
        return self.url.rstrip("/") + self.metrics_path


def _timeout_message(timeout_ms: int, interval_ms: int) -> str:
    return (f"scrape_timeout ({format_duration(timeout_ms)}) must not exceed "
            f"scrape_interval ({format_duration(interval_ms)})")


class Config(_Strict):
    """The whole configuration. Build with `load_config`, `parse_config` or `Config.default()`."""

    database: str = Field(DEFAULT_DATABASE, repr=False)  # may hold a password
    listen: str = DEFAULT_LISTEN
    external_url: str = ""
    rule_files: tuple[str, ...] = ()
    evaluation_interval_ms: PositiveDuration = Field(
        DEFAULT_INTERVAL_MS, alias="evaluation_interval")
    scrape_interval_ms: PositiveDuration = Field(DEFAULT_INTERVAL_MS, alias="scrape_interval")
    scrape_timeout_ms: PositiveDuration = Field(DEFAULT_TIMEOUT_MS, alias="scrape_timeout")
    retention_ms: PositiveDuration = Field(DEFAULT_RETENTION_MS, alias="retention")
    targets: tuple[TargetConfig, ...] = ()
    receivers: tuple[ReceiverConfig, ...] = ()

    _config_dir: Path = PrivateAttr(default_factory=Path.cwd)

    def model_post_init(self, context: Any) -> None:
        """Remember the folder relative paths are resolved against (from the validation context)."""
        if isinstance(context, Mapping) and context.get("config_dir") is not None:
            self._config_dir = Path(context["config_dir"])

    @property
    def config_dir(self) -> Path:
        """The config file's folder: rule_files and url_file paths are relative to it."""
        return self._config_dir

    @classmethod
    def default(cls) -> Config:
        """The built-in defaults: no targets, no receivers, SQLite in the working directory."""
        return parse_config({})

    @model_validator(mode="before")
    @classmethod
    def _fill_inherited(cls, data: Any) -> Any:
        return _inherit_defaults(data) if isinstance(data, dict) else data

    @field_validator("database")
    @classmethod
    def _check_database(cls, v: str) -> str:
        try:
            driver = make_url(v).drivername
        except (ArgumentError, ValueError):
            raise _problem("not a valid database URL (sqlite:///file.db, postgresql://…)") from None
        if driver.split("+")[0] not in ("sqlite", "postgresql"):
            raise _problem(f"unsupported database {driver!r} (use sqlite or postgresql)")
        return v

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, v: str) -> str:
        if _split_listen(v) is None:
            raise _problem("expected host:port, e.g. 127.0.0.1:9465")
        return v

    @field_validator("external_url")
    @classmethod
    def _check_external_url(cls, v: str) -> str:
        return _http_url(v, what="external URL").rstrip("/")

    @field_validator("rule_files")
    @classmethod
    def _check_rule_files(cls, v: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        base = Path((info.context or {}).get("config_dir", "."))
        for i, pattern in enumerate(v):
            full = pattern if Path(pattern).is_absolute() else str(base / pattern)
            # A glob may match nothing yet; a plain file name that is missing is a typo.
            if not _GLOB_CHARS.search(pattern) and not glob.glob(full):
                raise _problem("rule file not found", i)
        return v

    @field_validator("targets", "receivers")
    @classmethod
    def _unique_names(cls, v: tuple[Any, ...], info: ValidationInfo) -> tuple[Any, ...]:
        seen: dict[str, int] = {}
        for i, item in enumerate(v):
            if item.name in seen:
                raise _problem(_duplicate_message(item.name, str(info.field_name),
                                                  seen[item.name]), i, "name")
            seen[item.name] = i
        return v

    @model_validator(mode="after")
    def _global_timeout(self) -> Config:
        if self.scrape_timeout_ms > self.scrape_interval_ms:
            raise _problem(_timeout_message(self.scrape_timeout_ms, self.scrape_interval_ms),
                           "scrape_timeout")
        return self

    def rule_paths(self) -> list[Path]:
        """The rule files the globs match now, sorted, relative globs under `config_dir`."""
        out: set[Path] = set()
        for pattern in self.rule_files:
            full = pattern if Path(pattern).is_absolute() else str(self.config_dir / pattern)
            out.update(Path(p) for p in glob.glob(full))
        return sorted(out)

    def receiver(self, name: str) -> ReceiverConfig | None:
        """The receiver named `name`, if any."""
        return next((r for r in self.receivers if r.name == name), None)

    def secrets(self) -> list[str]:
        """Every secret-bearing resolved value, for the Redactor."""
        out: list[str] = []
        password = _database_password(self.database)
        if password:
            out += [self.database, password]
        for r in self.receivers:
            if r.webhook is not None:
                out += url_secret_parts(r.webhook.url)
                out += list(r.webhook.headers.values())
        return out


def _database_password(url: str) -> str | None:
    try:
        return make_url(url).password  # type: ignore[return-value]
    except (ArgumentError, ValueError):
        return None


def _split_listen(listen: str) -> tuple[str, int] | None:
    host, sep, port = str(listen).rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        return None
    return host.strip("[]"), int(port)


def _try_duration(value: Any, fallback: int) -> int:
    try:
        return parse_duration(str(value)) if isinstance(value, str | int) else fallback
    except ValueError:
        return fallback


def _inherit_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """Fill what is derived from other keys: external_url, scrape_timeout, per-target intervals.

    As in Prometheus, an unset scrape_timeout is the global one capped at the
    interval. A malformed global value falls back to the built-in default here,
    so its error is reported once, at the global key, not again per target.
    """
    data = dict(data)
    interval = _try_duration(data.get("scrape_interval"), DEFAULT_INTERVAL_MS)
    timeout = _try_duration(data.get("scrape_timeout"), DEFAULT_TIMEOUT_MS)
    if "scrape_timeout" not in data:
        timeout = min(timeout, interval)
        data["scrape_timeout"] = format_duration(timeout)
    if "external_url" not in data:
        hp = _split_listen(data.get("listen", DEFAULT_LISTEN))
        if hp is not None:
            host = hp[0] if hp[0] not in ("", "0.0.0.0", "::") else socket.gethostname()
            host = f"[{host}]" if ":" in host else host
            data["external_url"] = f"http://{host}:{hp[1]}"
    targets = data.get("targets")
    if isinstance(targets, list):
        data["targets"] = [_inherit_target(t, interval, timeout) for t in targets]
    return data


def _inherit_target(t: Any, interval: int, timeout: int) -> Any:
    if not isinstance(t, dict):
        return t
    t = dict(t)
    own = _try_duration(t.get("scrape_interval"), interval)
    t.setdefault("scrape_interval", format_duration(interval))
    t.setdefault("scrape_timeout", format_duration(min(timeout, own)))
    return t


# -- loading and error reporting ---------------------------------------------------------


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


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> Config:
    """Load and validate one YAML config file; ConfigError lists every problem.

    OSError propagates when the file itself cannot be read.
    """
    text = Path(path).read_text(encoding="utf-8")
    try:
        doc = load_positioned(text)
    except YamlSyntaxError as exc:
        raise ConfigError([ConfigProblem(str(path), exc.line or None, "", exc.message)]) from None
    problems: list[tuple[YamlPath, int | None, str]] = [
        (p.path, p.line, p.message) for p in doc.problems]
    data = {} if doc.data is None else doc.data
    if not isinstance(data, dict):
        raise ConfigError([ConfigProblem(str(path), 1, "", "the file must hold a YAML mapping")])
    config_dir = Path(path).resolve().parent
    return _build(data, str(path), config_dir, environ, problems, doc.line_of)


def parse_config(
    data: Mapping[str, Any], *, source: str = "<config>", config_dir: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Validate a config given as a mapping (as YAML would load it); ConfigError without lines."""
    base = Path(config_dir) if config_dir is not None else Path.cwd()
    return _build(dict(data), source, base, environ, [], None)


def _build(data: dict[str, Any], source: str, config_dir: Path, environ: Mapping[str, str] | None,
           problems: list[tuple[YamlPath, int | None, str]], line_of: Any) -> Config:
    expanded: list[str] = []
    data = _inherit_defaults(_expand(data, (), environ, problems, expanded))
    seen = {p for p, _, _ in problems}  # a missing variable's error says enough about its key
    config: Config | None = None
    try:
        config = Config.model_validate(data, context={"config_dir": config_dir})
    except ValidationError as exc:
        # pydantic skips cross-field checks of an item that has other errors;
        # the raw checks still report them, so one run lists everything.
        found = [_describe(err) for err in exc.errors()] + _raw_cross_checks(data)
        for path, message in found:
            if path not in seen:
                seen.add(path)
                problems.append((path, None, message))
    if not problems and config is not None:
        return config
    redactor = Redactor(expanded)
    out = [ConfigProblem(source, line if line else (line_of(p) if line_of else None),
                         _format_path(p), redactor.redact(msg)) for p, line, msg in problems]
    out.sort(key=lambda p: p.line or 0)
    raise ConfigError(out)


def _raw_cross_checks(data: dict[str, Any]) -> list[tuple[YamlPath, str]]:
    """Duplicate names and timeout > interval, on the raw mapping (as the validators check)."""
    out: list[tuple[YamlPath, str]] = []
    for section in ("targets", "receivers"):
        items = data.get(section)
        seen: dict[str, int] = {}
        for i, item in enumerate(items if isinstance(items, list) else []):
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str) and name in seen:
                out.append(((section, i, "name"), _duplicate_message(name, section, seen[name])))
            elif isinstance(name, str):
                seen[name] = i
    targets = data.get("targets")
    for i, t in enumerate(targets if isinstance(targets, list) else []):
        if isinstance(t, dict):
            interval = _try_duration(t.get("scrape_interval"), 0)
            timeout = _try_duration(t.get("scrape_timeout"), 0)
            if 0 < interval < timeout:
                out.append((("targets", i, "scrape_timeout"), _timeout_message(timeout, interval)))
    return out


def _duplicate_message(name: str, section: str, first: int) -> str:
    return f"duplicate name {name!r} (also {section}[{first}])"


def _expand(value: Any, path: YamlPath, environ: Mapping[str, str] | None,
            problems: list[tuple[YamlPath, int | None, str]], expanded: list[str]) -> Any:
    """Expand `${VAR}` in every string value, recording missing variables."""
    if isinstance(value, dict):
        return {k: _expand(v, path + (k,), environ, problems, expanded) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, path + (i,), environ, problems, expanded) for i, v in enumerate(value)]
    if isinstance(value, str) and "$" in value:
        try:
            result = expand_env(value, environ)
        except MissingEnvVar as exc:
            problems.append((path, None, str(exc)))
            return value
        if env_refs(value):
            expanded.append(result)
        return result
    return value


def _describe(err: Mapping[str, Any]) -> tuple[YamlPath, str]:
    """A pydantic error as (YAML path, human message)."""
    loc: YamlPath = tuple(err["loc"])
    ctx = err.get("ctx") or {}
    if err["type"] == "config":
        return loc + tuple(ctx.get("path", ())), str(ctx["message"])
    if err["type"] == "extra_forbidden":
        return loc, "unknown key" + _suggest(loc)
    if err["type"] == "missing":
        return loc, "required key is missing"
    msg = str(err["msg"])
    return loc, msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def _suggest(loc: YamlPath) -> str:
    model = _model_at(loc[:-1])
    if model is None or not isinstance(loc[-1], str):
        return ""
    keys = [f.alias or name for name, f in model.model_fields.items()]
    close = difflib.get_close_matches(loc[-1], keys, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else f" (expected one of: {', '.join(keys)})"


def _model_at(path: YamlPath) -> type[BaseModel] | None:
    """The model class that validates the mapping at `path`, if one does."""
    ann: Any = Config
    for part in path:
        ann = _unwrap_optional(ann)
        if isinstance(part, int) and get_origin(ann) in (tuple, list):
            ann = get_args(ann)[0]
        elif isinstance(part, str) and isinstance(ann, type) and issubclass(ann, BaseModel):
            field = next((f for n, f in ann.model_fields.items() if (f.alias or n) == part), None)
            if field is None:
                return None
            ann = field.annotation
        else:
            return None
    ann = _unwrap_optional(ann)
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def _unwrap_optional(ann: Any) -> Any:
    if get_origin(ann) in (Union, types.UnionType):
        rest = [a for a in get_args(ann) if a is not type(None)]
        return rest[0] if len(rest) == 1 else ann
    return ann


def _format_path(path: YamlPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# -- summary -----------------------------------------------------------------------------


def config_summary(config: Config) -> str:
    """The effective configuration as YAML, secrets redacted (for `sentinel check config`)."""
    doc = {
        "config_dir": str(config.config_dir),
        "database": _safe_database(config.database),
        "listen": config.listen,
        "external_url": config.external_url,
        "rule_files": list(config.rule_files),
        "evaluation_interval": format_duration(config.evaluation_interval_ms),
        "scrape_interval": format_duration(config.scrape_interval_ms),
        "scrape_timeout": format_duration(config.scrape_timeout_ms),
        "retention": format_duration(config.retention_ms),
        "targets": [_target_doc(t) for t in config.targets],
        "receivers": [_receiver_doc(r) for r in config.receivers],
    }
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    return Redactor(config.secrets()).redact(text)


def _target_doc(t: TargetConfig) -> dict[str, Any]:
    return {"name": t.name, "url": t.url, "metrics_path": t.metrics_path,
            "scrape_interval": format_duration(t.scrape_interval_ms),
            "scrape_timeout": format_duration(t.scrape_timeout_ms), "labels": dict(t.labels)}


def _receiver_doc(r: ReceiverConfig) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": r.name}
    if r.webhook is not None:
        w = r.webhook
        doc["webhook"] = {
            "url": safe_url(w.url), **({"url_file": w.url_file} if w.url_file else {}),
            "timeout": format_duration(w.timeout_ms), "send_resolved": w.send_resolved,
            "headers": {k: "<redacted>" for k in w.headers},
        }
    return doc


def _safe_database(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "<redacted>"
