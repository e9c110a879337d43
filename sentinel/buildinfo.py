"""What build of Sentinel is running: version, source commit, Python and platform.

A wheel carries `sentinel/_build.json`, written by setup.py when it was built;
a checkout asks git. Shown by `sentinel --version` and `sentinel_build_info`.
"""

from __future__ import annotations

import functools
import json
import platform
import subprocess
from importlib import resources
from pathlib import Path

from sentinel import __version__

_SOURCE_ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def build_info() -> dict[str, str]:
    """version, commit (short hash, `+dirty` when the checkout has changes), python, platform."""
    return {"version": __version__, "commit": _commit(),
            "python": platform.python_version(),
            "platform": f"{platform.system()} {platform.machine()}"}


def version_line() -> str:
    """One line for `--version`."""
    info = build_info()
    return (f"sentinel {info['version']} (commit {info['commit']}; "
            f"Python {info['python']}, {info['platform']})")


def _commit() -> str:
    try:
        stamped = resources.files("sentinel") / "_build.json"
        return str(json.loads(stamped.read_text())["commit"])
    except (OSError, ValueError, KeyError):
        pass
    if not (_SOURCE_ROOT / ".git").exists():
        return "unknown"
    try:
        head = subprocess.run(["git", "-C", str(_SOURCE_ROOT), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=2)
        dirty = subprocess.run(["git", "-C", str(_SOURCE_ROOT), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=2)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
