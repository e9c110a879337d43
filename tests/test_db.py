"""The database layer: schema from migrations, no drift, constraints, URLs and secrets."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, select, text
from sqlalchemy.exc import IntegrityError

from sentinel.incidents.db import (
    MIGRATIONS_ENV,
    Database,
    DatabaseError,
    find_migrations_dir,
    normalize_url,
)
from sentinel.incidents.models import Base, Incident, TimelineEvent, TimelineKind

T0 = datetime(2026, 11, 21, 10, 0, 5, tzinfo=UTC)


def _incident(key: str, status: str = "open", **kw: object) -> Incident:
    fields: dict[str, object] = dict(
        group_key=key, alertname=key.split("/")[0], target=key.split("/")[1], status=status,
        severity="warning", summary="", labels={}, opened_at=T0,
        resolved_at=None if status == "open" else T0 + timedelta(minutes=5), updated_at=T0,
    )
    fields.update(kw)
    return Incident(**fields)


HEAD = "0018"  # the newest migration: bump it with each new one


def test_upgrade_builds_schema_from_migrations(db_url: str) -> None:
    incident_db = _migrated(db_url)
    tables = set(inspect(incident_db.engine).get_table_names())
    assert {"incidents", "incident_alerts", "timeline_events", "alert_states",
            "alembic_version", "log_cursors", "log_events", "log_file_positions",
            "notify_intents", "notify_groups", "notify_outbox", "silences",
            "remediation_attempts", "remediation_targets", "approvals", "api_audit",
            "incident_series", "notify_holds", "alert_group_evals"} <= tables
    with incident_db.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD
    incident_db.upgrade()  # idempotent


def _migrated(url: str) -> Database:
    """A database taken to the head by running every migration (not `create_at_head`)."""
    db = Database(url)
    db.upgrade(HEAD)  # a named revision: Alembic runs the scripts one by one
    return db


def _schema(db: Database) -> dict[str, object]:
    """Every table's columns, keys, indexes and constraints, as the database reports them."""
    def norm(value: object) -> str:
        return " ".join(str(value).replace('"', "").split()) if value is not None else ""

    found: dict[str, object] = {}
    with db.engine.connect() as conn:
        insp = inspect(conn)
        for table in sorted(insp.get_table_names()):
            found[table] = {
                "columns": sorted((c["name"], norm(c["type"]), c["nullable"], norm(c["default"]))
                                  for c in insp.get_columns(table)),
                "pk": insp.get_pk_constraint(table)["constrained_columns"],
                "fks": sorted((tuple(f["constrained_columns"]), f["referred_table"],
                               tuple(f["referred_columns"]), norm(f.get("options")))
                              for f in insp.get_foreign_keys(table)),
                "indexes": sorted((i["name"], tuple(i["column_names"]), bool(i["unique"]),
                                   norm({k: str(v) for k, v in
                                         (i.get("dialect_options") or {}).items()}))
                                  for i in insp.get_indexes(table)),
                "uniques": sorted((u["name"], tuple(u["column_names"]))
                                  for u in insp.get_unique_constraints(table)),
                "checks": sorted((c["name"], norm(c["sqltext"]))
                                 for c in insp.get_check_constraints(table)),
            }
        if db.dialect == "sqlite":  # partial indexes' WHERE, which SQLite's reflection omits
            rows = conn.execute(text("SELECT name, sql FROM sqlite_master WHERE type = 'index' "
                                     "AND sql IS NOT NULL ORDER BY name")).all()
            found["sqlite_index_sql"] = [(name, norm(sql)) for name, sql in rows]
    return found


def test_models_do_not_drift_from_migrations(db_url: str) -> None:
    db = _migrated(db_url)
    with db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(context, Base.metadata)
    db.dispose()
    assert diff == []


def test_a_fresh_database_is_created_with_exactly_the_migrations_schema(
        db_url: str, tmp_path: Path) -> None:
    migrated = _migrated(db_url)
    expected = _schema(migrated)
    with migrated.engine.begin() as conn:  # empty the database again
        if migrated.dialect == "postgresql":
            schema = conn.execute(text("SELECT current_schema()")).scalar()
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    migrated.dispose()
    url = f"sqlite:///{tmp_path / 'fresh.db'}" if db_url.startswith("sqlite") else db_url
    fresh = Database(url)
    assert fresh.create_at_head()
    assert _schema(fresh) == expected
    assert fresh.current_revision() == HEAD
    assert not fresh.create_at_head()  # a database with tables is left to the migrations
    fresh.dispose()


def test_one_open_incident_per_key(incident_db: Database) -> None:
    with incident_db.session() as s:
        s.add(_incident("HighLatency/a"))
    with pytest.raises(IntegrityError), incident_db.session() as s:
        s.add(_incident("HighLatency/a"))
    # Resolved incidents do not count: any number may share the key.
    with incident_db.session() as s:
        s.add_all([_incident("HighLatency/a", "resolved"), _incident("HighLatency/a", "resolved"),
                   _incident("HighLatency/b")])
    with incident_db.session() as s:
        assert len(s.scalars(select(Incident)).all()) == 4


@pytest.mark.parametrize("fields", [
    {"status": "closed"},
    {"status": "resolved", "resolved_at": None},
    {"status": "open", "resolved_at": T0},
])
def test_incident_check_constraints(incident_db: Database, fields: dict[str, object]) -> None:
    with pytest.raises(IntegrityError), incident_db.session() as s:
        s.add(_incident("X/y", **fields))


def test_timeline_kinds_match_the_check_constraint(incident_db: Database) -> None:
    with incident_db.session() as s:
        incident = _incident("X/y")
        s.add(incident)
        s.flush()
        for kind in TimelineKind:
            s.add(TimelineEvent(incident_id=incident.id, at=T0, kind=kind, message="m", data=None))
    with pytest.raises(IntegrityError), incident_db.session() as s:
        s.add(TimelineEvent(incident_id=incident.id, at=T0, kind="bogus", message="m", data=None))


def test_foreign_keys_are_enforced(incident_db: Database) -> None:
    with pytest.raises(IntegrityError), incident_db.session() as s:
        s.add(TimelineEvent(incident_id=999, at=T0, kind="note", message="m", data=None))


def test_timestamps_come_back_aware_utc(incident_db: Database) -> None:
    plus2 = timezone(timedelta(hours=2))
    opened = datetime(2026, 11, 21, 12, 0, 5, 123000, tzinfo=plus2)
    with incident_db.session() as s:
        s.add(_incident("X/y", opened_at=opened))
    with incident_db.session() as s:
        got = s.scalars(select(Incident)).one().opened_at
    assert got == opened
    assert got.tzinfo is not None and got.utcoffset() == timedelta(0)
    assert got.hour == 10 and got.microsecond == 123000


def test_naive_timestamps_are_refused(incident_db: Database) -> None:
    with pytest.raises(Exception, match="naive datetime"), incident_db.session() as s:
        s.add(_incident("X/y", opened_at=datetime(2026, 1, 1)))  # noqa: DTZ001


def test_sqlite_pragmas_and_parent_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    db = Database("sqlite:///state/sub/sentinel.db")
    try:
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert (tmp_path / "state" / "sub").is_dir()
    finally:
        db.dispose()


def test_in_memory_sqlite_shares_one_database() -> None:
    db = Database("sqlite://")
    db.upgrade()
    with db.session() as s:
        s.add(_incident("X/y"))
    with db.session() as s:
        assert len(s.scalars(select(Incident)).all()) == 1


def test_plain_postgresql_url_gets_psycopg_driver() -> None:
    assert normalize_url("postgresql://u:p@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgresql+psycopg://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("sqlite:///x.db").drivername == "sqlite"


def test_invalid_url_is_a_clear_error() -> None:
    with pytest.raises(DatabaseError, match="invalid database URL"):
        Database("not a url")


def test_safe_url_hides_password() -> None:
    db = Database("postgresql://sentinel:hunter2-secret@127.0.0.1:1/incidents")
    assert "hunter2-secret" not in db.safe_url
    assert "hunter2-secret" not in repr(db)
    assert "***" in db.safe_url


def test_password_never_in_connection_error_refused() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    db = Database(f"postgresql://sentinel:s3cr3t-pw-xyz@127.0.0.1:{port}/incidents"
                  "?connect_timeout=5")
    with pytest.raises(DatabaseError) as info:
        db.upgrade()
    _assert_no_secret(info.value, "s3cr3t-pw-xyz")
    assert f"127.0.0.1:{port}" in str(info.value)


def test_password_never_in_authentication_error(postgres_url: str) -> None:
    url = normalize_url(postgres_url).set(password="wr0ng-pw-secret")
    db = Database(url)
    with pytest.raises(DatabaseError) as info:
        db.check()
    _assert_no_secret(info.value, "wr0ng-pw-secret")
    assert "password authentication failed" in str(info.value)
    with pytest.raises(DatabaseError) as info2, db.session() as s:
        s.execute(text("SELECT 1"))
    _assert_no_secret(info2.value, "wr0ng-pw-secret")


def _assert_no_secret(error: BaseException, secret: str) -> None:
    seen: BaseException | None = error
    while seen is not None:
        assert secret not in str(seen)
        assert secret not in repr(seen)
        seen = seen.__cause__ or seen.__context__


def test_migrations_dir_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "env.py").write_text("")
    monkeypatch.setenv(MIGRATIONS_ENV, str(tmp_path))
    assert find_migrations_dir() == tmp_path


def test_migrations_dir_default_is_next_to_the_package() -> None:
    assert find_migrations_dir() == Path(__file__).resolve().parents[1] / "migrations"


def test_missing_migrations_dir_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sentinel.paths

    monkeypatch.setenv(MIGRATIONS_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(DatabaseError, match="migrations directory not found.*SENTINEL_MIG"):
        find_migrations_dir()
    monkeypatch.delenv(MIGRATIONS_ENV)
    monkeypatch.setenv("SENTINEL_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setattr(sentinel.paths, "_SOURCE_ROOT", tmp_path / "a")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatabaseError, match="migrations directory not found.*SENTINEL_MIG"):
        find_migrations_dir()


def test_the_daemon_migrates_in_a_child_and_never_holds_alembic(tmp_path: Path) -> None:
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'child.db'}"
    script = ("import sys\nfrom sentinel.incidents.db import Database\n"
              f"db = Database({url!r})\ndb.upgrade_in_child()\ndb.upgrade_in_child()\n"
              "db.require_current_schema()\n"
              "assert 'alembic' not in sys.modules, 'alembic imported in the parent'\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    db = Database(url)
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD


def test_a_failed_migration_in_the_child_is_a_clear_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "migrations"
    (broken / "versions").mkdir(parents=True)
    (broken / "env.py").write_text("raise RuntimeError('env.py is broken')\n")
    (broken / "versions" / "0001_x.py").write_text('revision = "0001"\ndown_revision = None\n')
    monkeypatch.setenv("SENTINEL_MIGRATIONS_DIR", str(broken))
    db = Database(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(DatabaseError, match=r"migrating sqlite:///.*x\.db failed: "
                                            r"RuntimeError: env.py is broken"):
        db.upgrade_in_child()
