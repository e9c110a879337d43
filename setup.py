"""Ship rules/, migrations/ and deploy/ inside the wheel, and the commit it was built from.

The folders stay at the top of the repository (where operators and promtool
look for them), and a wheel built from it carries a copy under
`sentinel/_bundled/`, which `sentinel.paths.bundled_dir` finds with
`importlib.resources`. Editable installs skip the copy and read the checkout.

The sdist carries both folders (MANIFEST.in) and `sentinel/_build.json`, the
commit stamped when the sdist was made: a wheel built from an unpacked sdist
(as pip does from an index, or `python -m build`) has no git to ask.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

# deploy/: the example configs, the systemd unit and the dashboards, for a wheel
# user (`sentinel init --examples DIR` copies them out).
BUNDLED = ("rules", "migrations", "deploy")


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


class SdistWithStamp(sdist):
    """sdist that writes the commit into the release tree's `sentinel/_build.json`."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        root = Path(__file__).resolve().parent
        stamp = Path(base_dir) / "sentinel" / "_build.json"
        stamp.unlink(missing_ok=True)  # a hard link into the checkout, when one was made
        stamp.write_text(json.dumps({"commit": _commit(root)}))


def _commit(root: Path) -> str:
    """The checkout's commit, for `sentinel --version`.

    Outside git (an unpacked sdist), the stamp the sdist carries; else "unknown".
    """
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        if out.returncode == 0 and (root / ".git").exists():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return str(json.loads((root / "sentinel" / "_build.json").read_text())["commit"])
    except (OSError, ValueError, KeyError):
        return "unknown"


setup(cmdclass={"build_py": BuildPyWithBundled, "sdist": SdistWithStamp})
