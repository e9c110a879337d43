"""What several command groups share: the config and database arguments and how they are read.

Only the command line uses this module. Nothing heavy is imported at module
level: building the parser for `sentinel --help` must not pay for SQLAlchemy or
pydantic (bench/cli.py measures it).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from sentinel import exitcodes
from sentinel.cli.completion import files

if TYPE_CHECKING:
    from sentinel.config import Config
    from sentinel.incidents.db import Database

DEFAULT_CONFIG = "sentinel.yaml"


def config_arg(p: argparse.ArgumentParser) -> None:
    """`-c/--config`."""
    files(p.add_argument("-c", "--config", default=None,
                         help=f"config file (default ./{DEFAULT_CONFIG} if present, else "
                         "built-in defaults)"))


def db_args(p: argparse.ArgumentParser) -> None:
    """`-c/--config` and `--database`."""
    config_arg(p)
    p.add_argument("--database", help="database URL (overrides the config's)")


def since(text: str) -> datetime:
    """`--since`: a Prometheus duration ago, or an ISO-8601 time (UTC when no zone is given)."""
    from sentinel.config.durations import parse_duration

    try:
        return datetime.now(tz=UTC) - timedelta(milliseconds=parse_duration(text))
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a duration (1h, 7d) or ISO-8601 time: {text!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def config_path(path: str | None) -> str | None:
    """The config file a command reads: -c, else ./sentinel.yaml when present, else None."""
    if path is None and not Path(DEFAULT_CONFIG).exists():
        return None
    return path or DEFAULT_CONFIG


def load_config_or_exit(path: str | None) -> Config:
    """The whole config (every section validated); exit CONFIG with every problem when invalid.

    The lines are `check config`'s (`sentinel.config.errors.load_error_lines`).
    """
    from sentinel.config import Config, ConfigError, load_config
    from sentinel.config.errors import load_error_lines

    source = config_path(path)
    if source is None:
        return Config.default()
    try:
        return load_config(source)
    except (ConfigError, OSError) as exc:
        print("\n".join(load_error_lines(exc, source)), file=sys.stderr)
        raise SystemExit(exitcodes.CONFIG) from None


def database(args: argparse.Namespace, upgrade: bool = False,
             must_exist: bool = True) -> Database:
    """The database of `--database`, else of the config's `database` key.

    Only `sentinel db upgrade` (upgrade=True) creates or migrates; every other
    command needs an existing database at the current schema, and reads nothing
    of the config but its `database` key (so no receiver secret must be set, and
    no model of the other sections is built).
    """
    from sentinel.incidents.db import Database, open_existing

    url = args.database
    if not url:
        from sentinel.config.database import DEFAULT_DATABASE, load_database_url
        from sentinel.config.errors import ConfigError, load_error_lines

        path = config_path(args.config)
        try:
            url = load_database_url(path) if path else DEFAULT_DATABASE
        except (ConfigError, OSError) as exc:
            print("\n".join(load_error_lines(exc, path or DEFAULT_CONFIG)), file=sys.stderr)
            raise SystemExit(exitcodes.CONFIG) from None
    if upgrade:
        db = Database(url)
        db.upgrade()
        return db
    if not must_exist:
        return Database(url)  # to read its revision: nothing checked, nothing migrated
    return open_existing(url)
