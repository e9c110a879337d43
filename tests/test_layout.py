"""Issue 17's layout: what imports what, checked in fresh interpreters.

The core stages load without the command line, SQLAlchemy or the Google
clients; no stage imports the CLI; `sentinel --help` and the read-only
commands stay light (their start-up time is bench/cli.py's business, the
imports behind it are this file's).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "sentinel"

HEAVY = ("sentinel.cli", "sqlalchemy", "google", "alembic")


def _modules_after(code: str, *args: str) -> set[str]:
    """sys.modules of a fresh interpreter after `code` ran (printed as JSON on the last line)."""
    script = (f"import sys, json\n{code}\n"
              "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def _loaded(mods: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in mods if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_core_stages_import_no_cli_sqlalchemy_or_google() -> None:
    mods = _modules_after("import sentinel.collect, sentinel.store, sentinel.promql, "
                          "sentinel.rules")
    assert "sentinel.rules" in mods  # the probe ran
    assert _loaded(mods, HEAVY) == []


def test_the_pipeline_core_modules_stay_light_too() -> None:
    # one level deeper: what the daemon's hot path is made of
    mods = _modules_after("import sentinel.collect.scrape, sentinel.store.memory, "
                          "sentinel.promql.engine, sentinel.rules.manager, "
                          "sentinel.rules.loader")
    assert _loaded(mods, HEAVY) == []


def test_kubernetes_discovery_needs_no_google_client_for_its_backoff() -> None:
    # its backoff used to come from collect/gcp.py, which imports the Google clients
    mods = _modules_after("import sentinel.collect.kubernetes_sd")
    assert _loaded(mods, ("google", "sentinel.collect.gcp", "sentinel.cli")) == []


def _imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_no_stage_imports_the_command_line() -> None:
    offenders = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] == "cli" or rel.name == "__main__.py":
            continue
        cli = sorted(n for n in _imports_of(path) if n == "sentinel.cli"
                     or n.startswith("sentinel.cli."))
        if cli:
            offenders[str(rel)] = cli
    assert offenders == {}


def test_command_line_code_lives_in_the_cli_package() -> None:
    # argparse belongs to sentinel/cli/ (and the simulator's own __main__-style server entry)
    users = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
                   if p.relative_to(PKG).parts[0] != "cli"
                   and "argparse" in _imports_of(p))
    assert users == []
    flat = sorted(p.name for p in PKG.glob("config*.py")) + sorted(
        p.name for p in PKG.glob("*cli*.py"))
    assert flat == [], "configuration modules belong in sentinel/config/, CLI in sentinel/cli/"


def test_help_builds_the_parser_without_sqlalchemy_pydantic_or_google() -> None:
    mods = _modules_after("from sentinel.cli import build_parser\nbuild_parser().format_help()")
    assert _loaded(mods, ("sqlalchemy", "pydantic", "google", "alembic", "yaml",
                          "sentinel.respond", "sentinel.daemon", "sentinel.incidents")) == []


@pytest.fixture
def history_url(tmp_path: Path) -> str:
    from sentinel.incidents.db import Database

    url = f"sqlite:///{tmp_path}/history.db"
    db = Database(url)
    db.upgrade()
    db.engine.dispose()
    return url


def test_read_only_commands_need_no_alembic_pydantic_or_daemon(history_url: str,
                                                             tmp_path: Path) -> None:
    # a config whose receiver needs a secret that is not set: incidents list reads only its
    # database key
    config = tmp_path / "sentinel.yaml"
    config.write_text(f"database: {history_url}\nreceivers:\n  - name: pager\n    webhook:\n"
                      "      url: ${LAYOUT_TEST_UNSET_URL}\n", encoding="utf-8")
    code = ("from sentinel.cli import main\n"
            "assert main(sys.argv[1:]) == 0\n")
    for args in (["incidents", "list", "--database", history_url],
                 ["incidents", "list", "-c", str(config), "--json"],
                 ["silence", "list", "-c", str(config)]):
        mods = _modules_after(code, *args)
        assert "sentinel.incidents.db" in mods
        assert _loaded(mods, ("alembic", "pydantic", "google", "sentinel.respond.remediate",
                              "sqlalchemy.dialects.postgresql",
                              "sentinel.daemon", "sentinel.config.model",
                              "sentinel.incidents.tracker")) == []


def test_postgresql_engines_get_the_partial_index_where() -> None:
    """The PostgreSQL-only WHERE of the open-incident index is attached when a PostgreSQL
    Database is made (declaring it in the model would load the PostgreSQL dialect into every
    SQLite command); alembic's drift check does not compare WHERE clauses, so check the DDL."""
    code = (
        "from sqlalchemy.dialects import postgresql\n"
        "from sqlalchemy.schema import CreateIndex\n"
        "from sentinel.incidents.models import Base, OPEN_INCIDENT_KEY_INDEX\n"
        "index = next(i for i in Base.metadata.tables['incidents'].indexes\n"
        "             if i.name == OPEN_INCIDENT_KEY_INDEX)\n"
        "ddl = lambda: str(CreateIndex(index).compile(dialect=postgresql.dialect()))\n"
        "before = ddl()\n"
        "from sentinel.incidents.db import Database\n"
        "Database('postgresql://sentinel@127.0.0.1:1/none')  # no connection is made\n"
        "print(json.dumps([before, ddl()]))\n")
    out = subprocess.run([sys.executable, "-c", f"import json\n{code}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    before, after = json.loads(out)
    assert "WHERE" not in before
    assert after.endswith("(group_key) WHERE status = 'open'")


def test_console_flushes_before_its_quick_exit(history_url: str, tmp_path: Path) -> None:
    """`python -m sentinel` ends read-only commands with os._exit: the output must be there."""
    out = subprocess.run([sys.executable, "-m", "sentinel", "incidents", "list", "--json",
                          "--database", history_url], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and json.loads(out.stdout) == []
    missing = subprocess.run([sys.executable, "-m", "sentinel", "incidents", "list",
                              "--database", f"sqlite:///{tmp_path}/absent.db"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 4 and "absent.db" in missing.stderr


def test_sentinel_config_exports_resolve() -> None:
    import sentinel.config as config

    assert set(config.__all__) == set(config._WHERE)
    for name in config.__all__:
        assert getattr(config, name) is not None
    from sentinel.config import Config, ConfigError, load_config

    assert Config.__module__ == "sentinel.config.model"
    assert issubclass(ConfigError, Exception) and callable(load_config)
    with pytest.raises(AttributeError):
        _ = config.NoSuchThing  # type: ignore[attr-defined]
