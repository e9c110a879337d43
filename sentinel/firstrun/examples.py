"""The examples, systemd unit and dashboards a wheel carries (`sentinel init --examples DIR`).

A wheel has `sentinel/_bundled/deploy` (setup.py copies deploy/ there); an editable
install reads the checkout's deploy/. Files are copied, never overwritten.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from sentinel.paths import bundled_dir


def copy_examples(dest: Path) -> tuple[list[Path], list[Path]]:
    """Copy the bundled deploy/ folder into `dest`; returns (copied, kept as they were)."""
    source = bundled_dir("deploy")
    copied: list[Path] = []
    kept: list[Path] = []
    for path in sorted(source.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        target = dest / path.relative_to(source)
        if target.exists():
            kept.append(target)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        if target.name == "sentinel.service":
            target.write_text(with_exec_path(target.read_text(), installed_sentinel()))
        copied.append(target)
    return copied, kept


def installed_sentinel() -> str | None:
    """The absolute path of this installation's `sentinel` script (beside its Python)."""
    script = Path(sys.executable).parent / "sentinel"
    return str(script) if script.is_file() else shutil.which("sentinel")


def with_exec_path(unit: str, executable: str | None) -> str:
    """The unit with ExecStart naming `executable` (a venv is not on systemd's path)."""
    if executable is None:
        return unit
    return re.sub(r"^ExecStart=sentinel ", f"ExecStart={executable} ", unit, flags=re.M)
