"""A small on-disk cache of compiled signature sets, keyed by a hash of what they are built from.

Building a `SignatureSet` chooses prefilter anchors and compiles Hyperscan:
seconds of CPU, every time a `sentinel logs classify` starts. The result
depends only on the signature file and on the code that builds it, so it is
stored under a key hashing both (the file's bytes, the builder modules'
source, the Python and Hyperscan versions): an edited file or a new Sentinel
simply misses the cache.

Where: `$SENTINEL_SIGNATURE_CACHE` when set (`off` disables the cache), else
`__pycache__` beside this package (as Python keeps its bytecode), else the
user's cache directory (`$XDG_CACHE_HOME/sentinel` or `~/.cache/sentinel`).
Reads try each in turn; a write goes to the first that takes it. Nothing
here raises: an unreadable, unwritable or damaged cache only means building
again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

ENV = "SENTINEL_SIGNATURE_CACHE"
_SUFFIX = ".sigset"
KEEP = 8  # entries kept per folder: every edit of a signature file adds one


def cache_dirs() -> list[Path]:
    """Where compiled sets are looked for and stored, in order."""
    chosen = os.environ.get(ENV)
    if chosen:
        return [] if chosen == "off" else [Path(chosen)]
    user = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return [Path(__file__).resolve().parent / "__pycache__", Path(user) / "sentinel"]


def cache_key(source: bytes, builders: Iterable[str | Path], extra: str = "") -> str:
    """A key for what `source` compiles to with the builder modules at these paths."""
    h = hashlib.sha256()
    h.update(f"{sys.version_info[:2]}|{extra}|".encode())
    for path in builders:
        try:
            h.update(Path(path).read_bytes())
        except OSError:
            h.update(str(path).encode())
    h.update(b"\0")
    h.update(source)
    return h.hexdigest()[:40]


def read(key: str) -> bytes | None:
    """The blob stored under `key`, or None."""
    for folder in cache_dirs():
        try:
            return (folder / f"signatures-{key}{_SUFFIX}").read_bytes()
        except OSError:
            continue
    return None


def write(key: str, blob: bytes) -> Path | None:
    """Store `blob` under `key` in the first folder that takes it (atomically); its path or None."""
    for folder in cache_dirs():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".signatures-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                target = folder / f"signatures-{key}{_SUFFIX}"
                os.replace(tmp, target)
                _prune(folder)
                return target
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except OSError as exc:
            log.debug("signature cache: cannot write in %s (%s)", folder, exc)
    return None


def _prune(folder: Path) -> None:
    """Drop all but the KEEP most recently written entries of `folder`."""
    try:
        entries = sorted(folder.glob(f"signatures-*{_SUFFIX}"), key=lambda p: p.stat().st_mtime)
        for old in entries[:-KEEP]:
            old.unlink()
    except OSError:  # another process pruned first, or the folder went away
        pass
