"""The database handle: engine, sessions, and the Alembic upgrade that builds the schema.

SQLite (the embedded default) gets WAL, foreign keys and a busy timeout on
every connection, and one writer per file in a process: every session on a
SQLite file waits its turn on one lock before it begins, so Sentinel's own
threads (rule evaluation, notifier, act-first round, evidence recorder, log
jobs) queue behind each other instead of racing for SQLite's lock and giving
up after the busy timeout with "database is locked" (issue 49: a storm's long
transactions made them do exactly that). The busy timeout remains for other
processes (a `sentinel` command beside the daemon). PostgreSQL goes through
psycopg 3 and is unaffected. The schema is created
only by the migrations in `migrations/` (`Database.upgrade()`), never by
`metadata.create_all`, so what tests run against is what production runs.

Passwords in the URL never reach a log line or an error message: the URL is
only ever shown through `render_as_string(hide_password=True)`, and driver
errors are re-raised as `DatabaseError` with the password scrubbed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from sentinel import progress
from sentinel.paths import bundled_dir

MIGRATIONS_ENV = "SENTINEL_MIGRATIONS_DIR"
# How `upgrade_in_child` hands the URL (password included) to the child: the
# environment, which only the same user can read, never the command line.
MIGRATE_URL_ENV = "SENTINEL_MIGRATE_DATABASE_URL"
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Any constant works; it serialises concurrent `upgrade()` calls of several
# daemons sharing one PostgreSQL database.
_PG_MIGRATION_LOCK = 0x53454E54


class DatabaseError(Exception):
    """The database cannot be reached or migrated. The message never carries a password."""


def normalize_url(url: str | URL) -> URL:
    """Parse a database URL; plain `postgresql://` URLs get the psycopg 3 driver."""
    try:
        parsed = make_url(url)
    except exc.ArgumentError:
        raise DatabaseError("invalid database URL (expected e.g. sqlite:///path "
                            "or postgresql://user@host/db)") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def find_migrations_dir() -> Path:
    """Where the Alembic scripts live: $SENTINEL_MIGRATIONS_DIR, else the bundled migrations/.

    The bundled folder is found by `sentinel.paths.bundled_dir` ($SENTINEL_HOME,
    the copy inside an installed wheel, or the checkout).
    """
    env = os.environ.get(MIGRATIONS_ENV)
    if env:
        if not (Path(env) / "env.py").is_file():
            raise DatabaseError(f"migrations directory not found: {MIGRATIONS_ENV}={env} "
                                "has no env.py")
        return Path(env)
    try:
        path = bundled_dir("migrations")
    except FileNotFoundError as exc:
        raise DatabaseError(f"migrations directory not found: {exc} or {MIGRATIONS_ENV}") from None
    if not (path / "env.py").is_file():
        raise DatabaseError(f"{path} has no env.py; set {MIGRATIONS_ENV}")
    return path


def head_revision(migrations: Path | None = None) -> str:
    """The newest migration's revision id, read from the scripts without importing Alembic.

    The head is the one revision no other script names as its `down_revision`.
    """
    folder = (migrations or find_migrations_dir()) / "versions"
    revisions, parents = set(), set()
    for script in folder.glob("*.py"):
        body = script.read_text(encoding="utf-8")
        rev = re.search(r'^revision(?:: str)? = ["\']([^"\']+)', body, re.M)
        down = re.search(r'^down_revision(?:: [^=]+)? = ["\']([^"\']+)', body, re.M)
        if rev:
            revisions.add(rev.group(1))
        if down:
            parents.add(down.group(1))
    heads = revisions - parents
    if len(heads) != 1:
        raise DatabaseError(f"{folder}: expected one head revision, found {sorted(heads)}")
    return heads.pop()


def open_existing(url: str | URL) -> Database:
    """The database at `url`, which must exist with the current schema; nothing is created.

    For commands that read history or act on it: a wrong path or an old schema is
    an error that says what to do, never a fresh empty database.
    """
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        name = parsed.database or ""
        if name not in ("", ":memory:") and not name.startswith("file:"):
            path = Path(name).resolve()
            if not path.is_file():
                raise DatabaseError(
                    f"no database at {path} (from {parsed.render_as_string()}): give "
                    "--database or -c CONFIG, or create it with `sentinel db upgrade`")
    db = Database(parsed)
    db.require_current_schema()
    return db


class Database:
    """One database: an engine, a session factory and `upgrade()`."""

    def __init__(self, url: str | URL, *, echo: bool = False) -> None:
        self.url = normalize_url(url)
        if self.url.get_backend_name() == "postgresql":
            from sentinel.incidents.models import use_postgresql_options

            use_postgresql_options()
        self._password = self.url.password
        self.engine = _create_engine(self.url, echo=echo)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._writer = _sqlite_writer(self.url)

    @property
    def safe_url(self) -> str:
        """The URL with its password masked, fit for logs and errors."""
        return self.url.render_as_string(hide_password=True)

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self.engine.dialect.name

    def __repr__(self) -> str:
        return f"Database({self.safe_url!r})"

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on error."""
        with self._turn(), self._translate_errors(), self._sessions() as session, \
                session.begin():
            yield session

    @contextmanager
    def _turn(self) -> Iterator[None]:
        # Every SQLite session writes (BEGIN IMMEDIATE): one at a time per file. An
        # RLock, so a thread that nests sessions fails as it did (busy), not hangs.
        if self._writer is None:
            yield
            return
        with progress.turn(self._writer):  # busy behind the writer, not wedged (heartbeat.py)
            yield

    def check(self) -> None:
        """Connect and run `SELECT 1`, raising `DatabaseError` when that fails."""
        with self._translate_errors(), self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def current_revision(self) -> str | None:
        """The schema's revision (`alembic_version`), None for a database without one."""
        return self._current_revision()

    def _current_revision(self) -> str | None:
        """The schema's revision (`alembic_version`), None for a database without one."""
        with self._translate_errors(), self.engine.connect() as conn:
            try:
                return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            except exc.DatabaseError:
                return None

    def require_current_schema(self) -> None:
        """Raise DatabaseError unless the schema is at the head migration (without migrating)."""
        current = self._current_revision()
        head = head_revision()
        if current != head:
            found = f"schema version {current}" if current else "no Sentinel schema"
            raise DatabaseError(f"database {self.safe_url} has {found}, this Sentinel needs "
                                f"{head}: run `sentinel db upgrade`")

    def upgrade(self, revision: str = "head") -> None:
        """Run `alembic upgrade <revision>` with the scripts from `find_migrations_dir()`.

        A database already at the head is left alone without importing Alembic:
        the daemon would otherwise hold its ~9 MB for the whole run to learn that
        there was nothing to do.
        """
        if revision == "head" and self._current_revision() == head_revision():
            return
        if revision == "head" and self.create_at_head():
            return
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(find_migrations_dir()))
        with self._translate_errors(), self.engine.begin() as conn:
            if self.dialect == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
            config.attributes["connection"] = conn
            command.upgrade(config, revision)

    def create_at_head(self) -> bool:
        """Give an empty database the whole schema at once, stamped at the head.

        Alembic's recipe for a database built from scratch (create the tables from
        the models, then stamp): the same schema as running every migration, which
        tests/test_db.py checks table by table on both backends, without importing
        Alembic or starting a child process (a fresh daemon paid ~0.9 CPU-s for
        that, measured). False, and nothing done, when the database has any table
        or the migrations come from elsewhere ($SENTINEL_MIGRATIONS_DIR): then the
        migrations run as before.
        """
        if os.environ.get(MIGRATIONS_ENV):
            return False
        from sqlalchemy import inspect

        from sentinel.incidents.models import Base

        with self._translate_errors(), self.engine.begin() as conn:
            if self.dialect == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
            if inspect(conn).get_table_names():
                return False
            Base.metadata.create_all(conn)
            conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
                              "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"))
            conn.execute(text("INSERT INTO alembic_version (version_num) VALUES (:v)"),
                         {"v": head_revision()})
        return True

    def upgrade_in_child(self) -> None:
        """`upgrade()` to the head in a child process, so this one never imports Alembic.

        For the daemon: Alembic and the migration scripts stay loaded once
        imported (~10 MB of RSS for the whole run, measured), and a daemon
        migrates only on its first start after an upgrade. An in-memory SQLite
        database lives in this process only, so it is migrated here.
        """
        if self._current_revision() == head_revision() or self.create_at_head():
            return
        if self.dialect == "sqlite" and self.url.database in (None, "", ":memory:"):
            self.upgrade()
            return
        env = {**os.environ, MIGRATE_URL_ENV: self.url.render_as_string(hide_password=False)}
        proc = subprocess.run([sys.executable, "-m", "sentinel.incidents.migrate"], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if proc.returncode:
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            detail = _scrub(lines[-1] if lines else f"exit code {proc.returncode}",
                            self._password)
            raise DatabaseError(f"migrating {self.safe_url} failed: {detail}")

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    @contextmanager
    def _translate_errors(self) -> Iterator[None]:
        # Connection-level failures become DatabaseError with the URL shown
        # safely; constraint violations and the like pass through unchanged.
        try:
            yield
        except (exc.OperationalError, exc.InterfaceError) as e:
            detail = _scrub(str(e.orig if e.orig is not None else e), self._password)
            message = f"database {self.safe_url}: {detail.strip()}"
            if self._password and self._password in str(e):
                raise DatabaseError(message) from None
            raise DatabaseError(message) from e


_WRITERS: dict[str, threading.RLock] = {}
_WRITERS_GUARD = threading.Lock()


def _sqlite_writer(url: URL) -> threading.RLock | None:
    """The lock every session on this SQLite file takes first; None for PostgreSQL.

    Keyed by the file's resolved path, so two `Database` objects on one file (the
    daemon opens a few) share it; an in-memory database is its own.
    """
    if url.get_backend_name() != "sqlite":
        return None
    name = url.database or ""
    if name in ("", ":memory:") or name.startswith("file:"):
        return threading.RLock()
    key = str(Path(name).resolve())
    with _WRITERS_GUARD:
        return _WRITERS.setdefault(key, threading.RLock())


def _scrub(message: str, secret: str | None) -> str:
    return message.replace(secret, "***") if secret else message


def _create_engine(url: URL, *, echo: bool) -> Engine:
    if url.get_backend_name() != "sqlite":
        engine = create_engine(url, echo=echo, pool_pre_ping=True)
        event.listen(engine, "after_cursor_execute", _progressed)
        return engine
    database = url.database or ""
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
    if database in ("", ":memory:"):
        # One shared connection, or every session would see its own empty DB.
        kwargs["poolclass"] = StaticPool
    elif not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, echo=echo, **kwargs)
    event.listen(engine, "after_cursor_execute", _progressed)
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _progressed(*_args: Any) -> None:
    # Each statement done is progress of the thread that ran it (sentinel/progress.py).
    progress.mark()


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    # pysqlite's own transaction handling breaks SAVEPOINT (which the tracker
    # uses); hand transactions to SQLAlchemy instead (its documented recipe).
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _sqlite_begin(conn: Any) -> None:
    # IMMEDIATE takes the write lock up front, waiting up to busy_timeout. A
    # plain BEGIN that later upgrades to a write fails at once with "database
    # is locked" when another thread (a log job beside a rule evaluation)
    # holds it: SQLite cannot wait there without risking a deadlock.
    conn.exec_driver_sql("BEGIN IMMEDIATE")
