"""Watch the persistent XLA compilation cache (`VLLM_XLA_CACHE_PATH`): is the next restart warm?

One bounded walk of the directory tree per call. Symlinks are not
followed (a link out of the cache must not make us walk the disk); files
that vanish mid-walk and directories we may not read are skipped (and the
scan marked incomplete); the walk stops after `max_files` files. About
1 µs of Python plus one `lstat` per file: tens of thousands of files take
tens of milliseconds, fine every 30-60 s.

Series (labels `target`, `path`):
    sentinel_xla_cache_present            1 if the path is a directory, else 0
    sentinel_xla_cache_bytes              total size of the regular files
    sentinel_xla_cache_files              number of regular files
    sentinel_xla_cache_age_seconds        now - newest file's mtime (only with files)
    sentinel_xla_cache_oldest_age_seconds now - oldest file's mtime (only with files)
    sentinel_xla_cache_scan_complete      0 if the walk stopped early or skipped something
A missing cache gives present 0, bytes 0 and files 0, so one rule
(`sentinel_xla_cache_files == 0`) covers both missing and empty.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from sentinel.model import METRIC_NAME, Labels, labels_of

DEFAULT_MAX_FILES = 1_000_000


@dataclass(frozen=True, slots=True)
class CacheScan:
    """What one walk of the cache directory found."""

    present: bool
    files: int = 0
    bytes: int = 0
    newest_mtime_ns: int | None = None
    oldest_mtime_ns: int | None = None
    complete: bool = True


def scan_cache(path: str | os.PathLike[str], max_files: int = DEFAULT_MAX_FILES) -> CacheScan:
    """Walk `path` (not following symlinks) and total its regular files; never raises OSError."""
    try:
        if not stat.S_ISDIR(os.stat(path).st_mode):
            return CacheScan(present=False)
    except OSError:
        return CacheScan(present=False)
    files = size = 0
    newest: int | None = None
    oldest: int | None = None
    complete = True
    stack = [os.fspath(path)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:  # vanished or unreadable: what we could not see is not counted
            complete = False
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue  # symlinks, sockets, fifos
                st = entry.stat(follow_symlinks=False)
            except OSError:
                complete = False
                continue
            if files >= max_files:
                return CacheScan(True, files, size, newest, oldest, complete=False)
            files += 1
            size += st.st_size
            m = st.st_mtime_ns
            newest = m if newest is None or m > newest else newest
            oldest = m if oldest is None or m < oldest else oldest
    return CacheScan(True, files, size, newest, oldest, complete)


def xla_cache_samples(
    target: str, path: str | os.PathLike[str], now_ms: int, max_files: int = DEFAULT_MAX_FILES
) -> list[tuple[Labels, float]]:
    """The `sentinel_xla_cache_*` samples for one target's cache directory (see module doc)."""
    scan = scan_cache(path, max_files)
    shown = os.fspath(path)

    def sample(name: str, value: float) -> tuple[Labels, float]:
        return labels_of({METRIC_NAME: name, "target": target, "path": shown}), value

    out = [
        sample("sentinel_xla_cache_present", 1.0 if scan.present else 0.0),
        sample("sentinel_xla_cache_bytes", float(scan.bytes)),
        sample("sentinel_xla_cache_files", float(scan.files)),
        sample("sentinel_xla_cache_scan_complete", 1.0 if scan.complete else 0.0),
    ]
    if scan.newest_mtime_ns is not None and scan.oldest_mtime_ns is not None:
        out.append(sample("sentinel_xla_cache_age_seconds", _age_s(now_ms, scan.newest_mtime_ns)))
        out.append(
            sample("sentinel_xla_cache_oldest_age_seconds", _age_s(now_ms, scan.oldest_mtime_ns))
        )
    return out


def _age_s(now_ms: int, mtime_ns: int) -> float:
    # A file stamped in the future (clock skew, a copied cache) is as fresh as now.
    return max(0.0, (now_ms * 1_000_000 - mtime_ns) / 1e9)
