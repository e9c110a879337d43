"""XLA cache watch: present, size, file count and age of the cache directory as samples."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sentinel.collect.xla_cache import scan_cache, xla_cache_samples
from sentinel.model import METRIC_NAME

NOW_MS = 1_700_000_000_000


def by_name(target: str, path: Path, max_files: int = 1_000_000) -> dict[str, float]:
    out = {}
    for labels, value in xla_cache_samples(target, path, NOW_MS, max_files):
        d = dict(labels)
        assert (d["target"], d["path"]) == (target, str(path))
        out[d[METRIC_NAME]] = value
    return out


def put(path: Path, size: int, age_s: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    t_ns = NOW_MS * 1_000_000 - int(age_s * 1e9)
    os.utime(path, ns=(t_ns, t_ns))


def test_missing_cache(tmp_path: Path) -> None:
    assert by_name("t", tmp_path / "nope") == {
        "sentinel_xla_cache_present": 0.0,
        "sentinel_xla_cache_bytes": 0.0,
        "sentinel_xla_cache_files": 0.0,
        "sentinel_xla_cache_scan_complete": 1.0,
    }


def test_a_file_where_the_directory_should_be_is_not_a_cache(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("x")
    assert by_name("t", tmp_path / "cache")["sentinel_xla_cache_present"] == 0.0


def test_empty_cache_has_no_age(tmp_path: Path) -> None:
    (tmp_path / "cache" / "sub").mkdir(parents=True)
    got = by_name("t", tmp_path / "cache")
    assert got["sentinel_xla_cache_present"] == 1.0
    assert got["sentinel_xla_cache_files"] == 0.0
    assert "sentinel_xla_cache_age_seconds" not in got


def test_populated_cache_sizes_counts_and_ages(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    put(cache / "a" / "module_0001.pb", 1000, age_s=3600)
    put(cache / "a" / "b" / "module_0002.pb", 250, age_s=120.5)
    put(cache / "module_0003.pb", 5, age_s=86_400)
    got = by_name("tpu-a", cache)
    assert got == {
        "sentinel_xla_cache_present": 1.0,
        "sentinel_xla_cache_bytes": 1255.0,
        "sentinel_xla_cache_files": 3.0,
        "sentinel_xla_cache_scan_complete": 1.0,
        "sentinel_xla_cache_age_seconds": pytest.approx(120.5),
        "sentinel_xla_cache_oldest_age_seconds": pytest.approx(86_400),
    }


def test_a_file_from_the_future_is_as_fresh_as_now(tmp_path: Path) -> None:
    put(tmp_path / "c" / "f", 1, age_s=-30)
    assert by_name("t", tmp_path / "c")["sentinel_xla_cache_age_seconds"] == 0.0


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    put(outside / "big", 10_000, age_s=1)
    cache = tmp_path / "cache"
    put(cache / "f", 10, age_s=1)
    (cache / "link-dir").symlink_to(outside)
    (cache / "link-file").symlink_to(outside / "big")
    (cache / "loop").symlink_to(cache)
    scan = scan_cache(cache)
    assert (scan.files, scan.bytes, scan.complete) == (1, 10, True)


def test_the_walk_is_bounded(tmp_path: Path) -> None:
    for i in range(10):
        put(tmp_path / "c" / f"d{i % 3}" / f"f{i}", 1, age_s=1)
    got = by_name("t", tmp_path / "c", max_files=4)
    assert got["sentinel_xla_cache_files"] == 4.0
    assert got["sentinel_xla_cache_scan_complete"] == 0.0


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every directory")
def test_an_unreadable_directory_is_skipped_and_marks_the_scan_incomplete(tmp_path: Path) -> None:
    put(tmp_path / "c" / "ok", 7, age_s=1)
    put(tmp_path / "c" / "locked" / "hidden", 100, age_s=1)
    (tmp_path / "c" / "locked").chmod(0)
    try:
        scan = scan_cache(tmp_path / "c")
    finally:
        (tmp_path / "c" / "locked").chmod(0o755)
    assert (scan.files, scan.bytes, scan.complete) == (1, 7, False)
