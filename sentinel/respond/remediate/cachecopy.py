"""Copy an XLA cache directory tree, replacing the destination only once the copy is whole.

The cache often lives in /dev/shm, which a node restart empties; a durable
copy brings a restart back warm. The copy goes to a sibling temporary folder
first and is swapped in with renames, so a crash mid-copy never leaves a
half cache where the server would read it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def copy_tree(source: str, dest: str) -> int:
    """Copy `source` to `dest` (replacing it); returns how many files were copied."""
    src, dst = Path(source), Path(dest)
    if not src.is_dir():
        raise FileNotFoundError(f"{src} is not a directory")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.sentinel-tmp-{os.getpid()}")
    old = dst.with_name(f".{dst.name}.sentinel-old-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, symlinks=True)
    try:
        if dst.exists():
            dst.rename(old)
        tmp.rename(dst)
    except OSError:
        # `dest` is a mount point (a container volume): fill it in place instead.
        shutil.copytree(tmp, dst, symlinks=True, dirs_exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    return sum(len(files) for _, _, files in os.walk(dst))
