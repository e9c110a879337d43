"""Ship rules/ and migrations/ inside the wheel.

The folders stay at the top of the repository (where operators and promtool
look for them), and a wheel built from it carries a copy under
`sentinel/_bundled/`, which `sentinel.paths.bundled_dir` finds with
`importlib.resources`. Editable installs skip the copy and read the checkout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUNDLED = ("rules", "migrations")


class BuildPyWithBundled(build_py):
    """build_py that also copies the bundled folders into the built package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        root = Path(__file__).resolve().parent
        for name in BUNDLED:
            dest = Path(self.build_lib) / "sentinel" / "_bundled" / name
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(root / name, dest,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        stamp = Path(self.build_lib) / "sentinel" / "_build.json"
        stamp.write_text(json.dumps({"commit": _commit(root)}))


def _commit(root: Path) -> str:
    """The checkout's commit, for `sentinel --version`; "unknown" outside git."""
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


setup(cmdclass={"build_py": BuildPyWithBundled})
