"""Shared test fixtures. Area fixtures live in tests/fixtures_*.py and are registered here.

The suite runs in parallel (pytest-xdist, `-n` in pyproject's addopts): every
test gets its own tmp_path, ports are port 0, each worker starts its own
PostgreSQL cluster (a schema per test). Any test may run beside any other:
nothing pins tests to a worker (`xdist_group` with `--dist loadgroup` groups
nothing on pytest 9.2, pytest-dev/pytest-xdist#1386), so work that must
happen once per run takes a file lock in the run's shared temp folder (see
tests/test_packaging.py). `-n 0` runs in one process, e.g. under a debugger.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["fixtures_postgres", "fixtures_e2e", "notify_helpers"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first, in their collected order.

    xdist hands tests out in collection order; a two-minute chaos test picked up
    last keeps one worker busy long after the other has finished. Started first,
    the slow tests overlap the many short ones. The sort is stable and the same in
    every worker (xdist requires each worker to collect the same order).
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
