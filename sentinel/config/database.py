"""Only the `database` key of a config file, for commands that read history.

`sentinel incidents list`, `silence list` and the like need the database URL
and nothing else: reading it here builds no pydantic model of the other
sections and needs no receiver's secret in the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sentinel.config.errors import ConfigError, ConfigProblem, missing_env_message
from sentinel.config.yamlpos import YamlSyntaxError, load_positioned
from sentinel.secrets import MissingEnvVar, expand_env

DEFAULT_DATABASE = "sqlite:///sentinel.db"


def load_database_url(path: str | Path, environ: Mapping[str, str] | None = None) -> str:
    """Only the `database` key of a config file, `${VAR}` expanded in it alone.

    Commands that only read history need nothing else, so they run without the
    environment holding every receiver's secret. ConfigError names file and line.
    """
    text = Path(path).read_text(encoding="utf-8")
    try:
        doc = load_positioned(text)
    except YamlSyntaxError as exc:
        raise ConfigError([ConfigProblem(str(path), exc.line or None, "", exc.message)]) from None
    data = doc.data if isinstance(doc.data, dict) else {}
    value = data.get("database", DEFAULT_DATABASE)
    line = doc.line_of(("database",)) if "database" in data else None
    if not isinstance(value, str):
        raise ConfigError([ConfigProblem(str(path), line, "database", "expected a URL string")])
    try:
        url = expand_env(value, environ)
    except MissingEnvVar as exc:
        raise ConfigError([ConfigProblem(str(path), line, "database",
                                         missing_env_message(exc.name))]) from None
    if "database" not in data:
        return url  # the default: the working directory, as `run` has it
    return resolve_sqlite_path(url, Path(path).resolve().parent)


def resolve_sqlite_path(url: str, config_dir: Any) -> str:
    """`url` with a relative SQLite file made absolute under `config_dir` (when one is given).

    Relative paths in a config mean the config file's folder, whatever the working
    directory: `sqlite:///sentinel.db` in /etc/sentinel/sentinel.yaml is
    /etc/sentinel/sentinel.db. In-memory and `file:` URI databases are left alone,
    and so is any other URL (PostgreSQL). Unparsable URLs are returned unchanged.
    """
    if config_dir is None or not url.startswith("sqlite"):
        return url
    prefix, sep, rest = url.partition(":///")
    name, qmark, query = rest.partition("?")
    if not sep or name in ("", ":memory:") or name.startswith("file:") or Path(name).is_absolute():
        return url
    return f"{prefix}{sep}{Path(config_dir) / name}{qmark}{query}"
