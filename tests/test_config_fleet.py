"""The `fleet:` section (issue 49): defaults, and every error with file:line and key."""

from __future__ import annotations

from pathlib import Path

from test_config import errors, write

from sentinel.config import load_config


def test_defaults_and_values(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "listen: 127.0.0.1:0\n")).fleet.min_targets == 10
    path = write(tmp_path, """
        fleet:
          min_targets: 25
          min_fraction: 0.5
          window: 2m
          group_by: [pool]
          breakdown_by: [zone]
          list_limit: 5
        """)
    f = load_config(path).fleet
    assert (f.min_targets, f.min_fraction, f.window_ms, f.group_by, f.breakdown_by,
            f.list_limit) == (25, 0.5, 120_000, ("pool",), ("zone",), 5)


def test_errors_name_file_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, """
        fleet:
          min_targets: 1
          min_fraction: 1.5
          window: soon
          list_size: 3
        """)
    found = errors(path)
    assert [line.split(": ", 2)[:2] for line in found] == [
        [f"{path}:2", "fleet.min_targets"], [f"{path}:3", "fleet.min_fraction"],
        [f"{path}:4", "fleet.window"], [f"{path}:5", "fleet.list_size"]], found
