"""Which files beside a followed log were rotated after the one read last.

A file rotated more than once between two polls, or while Sentinel was
stopped, left files behind that were never opened: logrotate's default
scheme shifts them (`vllm.log.1` -> `vllm.log.2`), `dateext` names them by
day (`vllm.log-20261207`), others by number. Names do not say the order
across schemes; modification times do, since a rotation scheme writes to
the newest file only: the files rotated after the one read last were
written after it stopped being written.
"""

from __future__ import annotations

import os

COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip")


def rotated_between(path: str, old: tuple[int, int], new: tuple[int, int],
                    old_mtime_ns: int | None, opened: set[tuple[int, int]]) -> list[str]:
    """The paths of the files rotated after `old` and before `new` (device, inode), oldest first.

    Beside `path`, named after it, not compressed, on `old`'s device, not
    `old` nor `new` nor any file in `opened` (a rotated file written late is
    no new file), modified later than `old` (`old_mtime_ns`; None: unknown,
    every such file). Files rotated before `old` stopped being written
    before it did, and a copy made by copytruncate is no newer than its
    original. After a restart (`opened` empty), a file rotated before `old`
    but written to later than it would be taken: rotation schemes do not.
    """
    directory = os.path.dirname(path) or "."
    base = os.path.basename(path)
    found: list[tuple[int, str]] = []
    with os.scandir(directory) as entries:
        for e in entries:
            if not e.name.startswith(base) or e.name == base \
                    or e.name.endswith(COMPRESSED) or not e.is_file(follow_symlinks=False):
                continue
            st = e.stat(follow_symlinks=False)
            ident = (st.st_dev, st.st_ino)
            if ident in (old, new) or ident in opened or st.st_dev != old[0]:
                continue
            if old_mtime_ns is None or st.st_mtime_ns > old_mtime_ns:
                found.append((st.st_mtime_ns, e.path))
    return [p for _, p in sorted(found)]
