"""The examples, systemd unit and dashboards a wheel carries (`sentinel init --examples DIR`).

A wheel has `sentinel/_bundled/deploy` (setup.py copies deploy/ there); an editable
install reads the checkout's deploy/. Files are copied, never overwritten.
"""

from __future__ import annotations

import shutil
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
        copied.append(target)
    return copied, kept
