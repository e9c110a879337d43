"""A SQLite incident database already at the head revision, copied instead of migrated.

A daemon that starts on a new SQLite file migrates it in a child process
(`Database.upgrade_in_child`): ~1 CPU-s of imports and DDL for every test that
starts one. Tests whose point is not the migration (tests/test_db.py and the
migration tests keep migrating) copy a file that this process migrated once,
with the same migrations; the daemon finds it at head and starts at once.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from sentinel.incidents.db import Database

_template: Path | None = None


def migrated_sqlite(path: Path) -> Path:
    """Put an empty incident database at the head revision at `path` (a new file)."""
    global _template
    if _template is None:
        folder = Path(tempfile.mkdtemp(prefix="sentinel-db-template-"))
        atexit.register(shutil.rmtree, folder, True)
        db = Database(f"sqlite:///{folder / 'sentinel.db'}")
        db.upgrade()
        db.dispose()
        _template = folder / "sentinel.db"
    assert not path.exists(), f"{path} exists: copy the template into a new file only"
    shutil.copyfile(_template, path)
    return path
