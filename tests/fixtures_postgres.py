"""PostgreSQL fixtures for the store tests (owned by the incidents work).

`postgres_url` (session): $SENTINEL_TEST_POSTGRES_URL if set, else a
throwaway cluster started from /usr/lib/postgresql/*/bin on 127.0.0.1 (a free
port, socket dir and data in a temp dir, password auth over TCP so tests see
a real password), stopped at the end. PostgreSQL refuses to run as root, so
as root the binaries run as the `postgres` user. Without the binaries the
PostgreSQL tests are skipped, unless CI=true, where that is a failure.

`db_url` runs a test on both backends: a SQLite file in tmp_path, and a fresh
schema on the PostgreSQL server (dropped afterwards). `incident_db` is a
`Database` on it, already upgraded by the migrations.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_ports import free_port
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from sentinel.incidents.db import Database

PG_SUPERUSER = "postgres"


def _pg_bindir() -> Path | None:
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    for d in reversed(dirs):
        if (Path(d) / "initdb").is_file() and (Path(d) / "pg_ctl").is_file():
            return Path(d)
    return None


def _as_postgres(cmd: list[str]) -> list[str]:
    """Run as the postgres system user when we are root (postgres refuses root)."""
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


def _run(cmd: list[str]) -> None:
    done = subprocess.run(_as_postgres(cmd), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:2])} failed ({done.returncode}): "
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")


class _Cluster:
    """A throwaway PostgreSQL cluster in a temp dir."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        # Not under pytest's tmp dirs: those are root-only (0700) and the
        # postgres user must be able to reach its data directory.
        self.root = Path(tempfile.mkdtemp(prefix="sentinel-pg-"))
        self.data = self.root / "data"
        self.password = secrets.token_hex(12)
        self.port = 0

    def start(self) -> str:
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            shutil.chown(self.root, user="postgres")
            shutil.chown(pwfile, user="postgres")
        _run([str(self.bindir / "initdb"), "-D", str(self.data), "-U", PG_SUPERUSER,
              "--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}",
              "-E", "UTF8", "--locale=C", "--no-sync"])
        for attempt in range(3):
            self.port = free_port()
            opts = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
            try:
                _run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", opts,
                      "-l", str(self.root / "log"), "-w", "-t", "60", "start"])
                break
            except RuntimeError:
                if attempt == 2:  # a port race is the likely cause; retry twice
                    raise RuntimeError("PostgreSQL did not start:\n" + self.log_tail()) from None
        return (f"postgresql+psycopg://{PG_SUPERUSER}:{self.password}"
                f"@127.0.0.1:{self.port}/postgres")

    def log_tail(self) -> str:
        log = self.root / "log"
        return log.read_text(errors="replace")[-3000:] if log.exists() else ""

    def stop(self) -> None:
        if self.data.exists():
            subprocess.run(_as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.data),
                                         "-m", "immediate", "-w", "stop"]),
                           capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server URL (superuser on its `postgres` database)."""
    if url := os.environ.get("SENTINEL_TEST_POSTGRES_URL"):
        yield url
        return
    bindir = _pg_bindir()
    if bindir is None:
        reason = "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin " \
                 "(install postgresql, or set SENTINEL_TEST_POSTGRES_URL)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    cluster = _Cluster(bindir)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> Iterator[str]:
    """The test server with a new, empty schema first on the search_path; dropped afterwards.

    A schema rather than a database: CREATE DATABASE costs ~0.3 s a test,
    CREATE SCHEMA a millisecond, and everything (alembic_version included)
    lands in the schema all the same.
    """
    admin_url = make_url(postgres_url)
    if admin_url.drivername in ("postgresql", "postgres"):
        admin_url = admin_url.set(drivername="postgresql+psycopg")
    name = f"sentinel_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{name}"'))
        url = admin_url.update_query_dict({"options": f"-csearch_path={name}"})
        yield url.render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))
    finally:
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL, once per backend: a SQLite file, and a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'sentinel.db'}"
    return str(request.getfixturevalue("fresh_postgres_url"))


@pytest.fixture
def incident_db(db_url: str) -> Iterator[Database]:
    """A `Database` on `db_url`, migrated to head."""
    db = Database(db_url)
    db.upgrade()
    try:
        yield db
    finally:
        db.dispose()
