"""Where Sentinel's bundled folders (rules/, migrations/) are: installed or in a checkout."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def _installed_dir(name: str) -> Path:
    """The copy a built wheel carries as `sentinel/_bundled/<name>` (see setup.py)."""
    return Path(str(resources.files("sentinel") / "_bundled" / name))


def bundled_dir(name: str) -> Path:
    """The bundled folder `name`.

    Looked for in order: $SENTINEL_HOME/name (an operator's override), the copy
    inside the installed package (a wheel, pipx, the image), the checkout beside
    the package source (an editable install). The working directory is never
    consulted, so a command behaves the same from any folder.
    Raises FileNotFoundError naming every place looked at.
    """
    candidates = []
    home = os.environ.get("SENTINEL_HOME")
    if home:
        candidates.append(Path(home) / name)
    candidates += [_installed_dir(name), _SOURCE_ROOT / name]
    for path in candidates:
        if path.is_dir():
            return path
    looked = ", ".join(str(p) for p in candidates)
    raise FileNotFoundError(
        f"cannot find the {name}/ folder (looked in {looked}); set SENTINEL_HOME"
    )
