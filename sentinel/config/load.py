"""Loading a config file: YAML with line numbers, `${VAR}` expansion, every problem at once.

`load_config(path)` reads the file keeping each key's line (`yamlpos`),
expands `${VAR}` from the environment, validates with the models of
`sentinel.config.model`, and raises one `ConfigError` listing every problem
as `FILE:LINE: key.path: message`. Secrets never appear in messages.
`config_summary` prints the effective configuration with secrets redacted.
Import these through `sentinel.config`.
"""

from __future__ import annotations

import difflib
import enum
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from sentinel.config.database import DEFAULT_DATABASE, load_database_url
from sentinel.config.durations import format_duration
from sentinel.config.errors import ConfigError, ConfigProblem, missing_env_message
from sentinel.config.model import (
    Config,
    duplicate_message,
    inherit_defaults,
    timeout_message,
    try_duration,
)
from sentinel.config.yamlpos import Path as YamlPath
from sentinel.config.yamlpos import YamlSyntaxError, load_positioned
from sentinel.secrets import MissingEnvVar, Redactor, env_refs, expand_env, safe_url

__all__ = ["DEFAULT_DATABASE", "ConfigError", "ConfigProblem", "config_summary", "format_path",
           "load_config", "load_database_url", "parse_config"]


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> Config:
    """Load and validate one YAML config file; ConfigError lists every problem.

    OSError propagates when the file itself cannot be read.
    """
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError([ConfigProblem(str(path), line, "", "not UTF-8 text")]) from None
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
    data = inherit_defaults(_expand(data, (), environ, problems, expanded))
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
                         format_path(p), redactor.redact(msg)) for p, line, msg in problems]
    out.sort(key=lambda p: p.line or 0)
    raise ConfigError(out)


def _raw_cross_checks(data: dict[str, Any]) -> list[tuple[YamlPath, str]]:
    """Duplicate names and timeout > interval, on the raw mapping (as the validators check)."""
    out: list[tuple[YamlPath, str]] = []
    for section in ("targets", "receivers", "kubernetes_sd"):
        items = data.get(section)
        seen: dict[str, int] = {}
        for i, item in enumerate(items if isinstance(items, list) else []):
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str) and name in seen:
                out.append(((section, i, "name"), duplicate_message(name, section, seen[name])))
            elif isinstance(name, str):
                seen[name] = i
    targets = data.get("targets")
    for i, t in enumerate(targets if isinstance(targets, list) else []):
        if isinstance(t, dict):
            interval = try_duration(t.get("scrape_interval"), 0)
            timeout = try_duration(t.get("scrape_timeout"), 0)
            if 0 < interval < timeout:
                out.append((("targets", i, "scrape_timeout"), timeout_message(timeout, interval)))
    return out


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
            problems.append((path, None, missing_env_message(exc.name)))
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


def format_path(path: YamlPath) -> str:
    """`a.b[0].c`, as config errors name a key."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# -- summary -----------------------------------------------------------------------------


# Targets shown in full by `config_summary`; a fleet's list is summarised past them.
SUMMARY_TARGETS = 50


def config_summary(config: Config) -> str:
    """The effective configuration as YAML, every section, secrets redacted.

    Walks the models generically, so a section added to the config shows up here
    without a summary of its own: keys by their YAML names, durations as `5s`, and
    every secret-bearing field (`repr=False` in the models) masked. Past
    SUMMARY_TARGETS targets, the rest are counted, not printed (issue 49: 50,000
    targets were ~1.5 million lines and most of a minute of CPU, read by no one).
    """
    shown = config
    more = len(config.targets) - SUMMARY_TARGETS
    if more > 0:
        shown = config.model_copy(update={"targets": config.targets[:SUMMARY_TARGETS]})
    doc = {"config_dir": str(config.config_dir), **_model_doc(shown)}
    if more > 0:
        doc["targets"].append(f"... and {more} more targets, not shown")
    # libyaml's emitter where PyYAML has it: the pure-Python one took ~60 CPU-s for
    # 10,000 targets (issue 49); the text is the same.
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text = yaml.dump(doc, Dumper=dumper, sort_keys=False, default_flow_style=False)
    return Redactor(config.secrets()).redact(text)


def _model_doc(model: BaseModel) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        key = field.alias or name
        if not field.repr:
            doc[key] = _masked(name, value)
        elif name.endswith("_ms") and isinstance(value, int) and not isinstance(value, bool):
            doc[key] = format_duration(value)
        else:
            doc[key] = _value_doc(value)
    return doc


def _value_doc(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return _model_doc(value)
    if isinstance(value, dict):
        return {str(k): _value_doc(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_value_doc(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def _masked(name: str, value: Any) -> Any:
    """A secret-bearing field as it may be shown: URLs without their secret parts."""
    if not value:
        return value
    if name == "database":
        return _safe_database(value)
    if isinstance(value, dict):
        return {k: "<redacted>" for k in value}
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        return safe_url(value)
    return "<redacted>"


def _safe_database(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "<redacted>"
