"""Where Sentinel's bundled folders (rules/, migrations/) are, in a checkout or an image."""

from __future__ import annotations

import os
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def bundled_dir(name: str) -> Path:
    """The bundled folder `name`: $SENTINEL_HOME/name, else beside the package source, else ./name.

    Raises FileNotFoundError naming every place looked at.
    """
    candidates = []
    home = os.environ.get("SENTINEL_HOME")
    if home:
        candidates.append(Path(home) / name)
    candidates += [_SOURCE_ROOT / name, Path.cwd() / name]
    for path in candidates:
        if path.is_dir():
            return path
    looked = ", ".join(str(p) for p in candidates)
    raise FileNotFoundError(
        f"cannot find the {name}/ folder (looked in {looked}); set SENTINEL_HOME"
    )
