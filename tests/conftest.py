"""Shared test fixtures. Area fixtures live in tests/fixtures_*.py and are registered here.

The suite runs in parallel (pytest-xdist, `-n` in pyproject's addopts): every
test gets its own tmp_path, ports are port 0, each worker starts its own
PostgreSQL cluster (a schema per test). Any test may run beside any other:
nothing pins tests to a worker (`xdist_group` with `--dist loadgroup` groups
nothing on pytest 9.2, pytest-dev/pytest-xdist#1386), so work that must
happen once per run takes a file lock in the run's shared temp folder (see
tests/test_packaging.py), and so do the few CPU-heavy tests (marker `heavy`),
one at a time. `-n 0` runs in one process, e.g. under a debugger.

Most of the suite's time is waiting (scrape and evaluation intervals, leases,
outages), not CPU: pyproject runs more workers than cores, handing out one test
at a time, longest first (durations.txt), so the long waits overlap.
"""

from __future__ import annotations

import fcntl
import os
import ssl
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx._transports.default as _httpx_transports
import pytest
from httpx._config import create_ssl_context as _create_ssl_context

pytest_plugins = ["fixtures_postgres", "fixtures_e2e", "fixtures_promapi", "notify_helpers"]

# Bytecode caches on, also for the test workers and the daemons tests start: with
# PYTHONDONTWRITEBYTECODE set (this machine sets it), each worker recompiled sentinel
# and re-rewrote every test module while collecting (11-15 CPU-s a worker, not 5).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

_DEFAULT_TLS: dict[tuple[str | None, str | None, bool], ssl.SSLContext] = {}


def _shared_default_tls(verify: object = True, cert: object = None,
                        trust_env: bool = True) -> ssl.SSLContext:
    """httpx's default TLS context, built once per test process (and CA settings).

    Every `httpx.get`/`post` builds a client, and every client builds a TLS context
    by loading the CA bundle, even for http:// on loopback: ~40 ms of CPU each, over
    a thousand times a run. Any other `verify`/`cert` goes to httpx as it is.
    """
    if verify is not True or cert is not None:
        return _create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)  # type: ignore[arg-type]
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"), trust_env)
    if key not in _DEFAULT_TLS:
        _DEFAULT_TLS[key] = _create_ssl_context(trust_env=trust_env)
    return _DEFAULT_TLS[key]


_httpx_transports.create_ssl_context = _shared_default_tls  # type: ignore[assignment]

DURATIONS = Path(__file__).with_name("durations.txt")
SLOW_UNMEASURED_S = 5.0  # a `slow` test not yet in durations.txt


def _durations() -> dict[str, float]:
    out: dict[str, float] = {}
    if DURATIONS.exists():
        for line in DURATIONS.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                seconds, name = line.split(None, 1)
                out[name.strip()] = float(seconds)
    return out


# Load per core above which a failed test's report says the machine was starved.
STARVED_LOAD_PER_CORE = 4.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # noqa: ANN201
    """A failed test's report says how loaded the machine was when it failed.

    The end-to-end tests wait for events with generous deadlines; on a starved machine
    (issue 53: load 20-40 on 2 cores) a deadline can still pass. The report then says
    so, so a newcomer can tell load from a defect: rerun it alone before reading it as
    one.
    """
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when == "call" and hasattr(os, "getloadavg"):
        one, five, _ = os.getloadavg()
        cores = os.cpu_count() or 1
        text = f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {cores} cores"
        if max(one, five) / cores > STARVED_LOAD_PER_CORE:
            text += (": the machine was starved while this ran; a failure that names a "
                     "deadline ('timed out after N s waiting for ...') may be load, not a "
                     "defect: rerun this test alone")
        report.sections.append(("machine load", text))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest tests first, each followed by a short one; then the rest as collected.

    xdist (`--dist load --maxschedchunk=1`) gives each worker two tests at the start
    and then one more whenever one finishes, so a worker always holds the test it runs
    and the next. Paired with a short test, the long tests start side by side on
    different workers instead of queueing behind each other, and the many short tests
    fill the gaps. The order is the same in every worker (xdist requires it).
    """
    known = _durations()

    def seconds(item: pytest.Item) -> float:
        if item.nodeid in known:
            return known[item.nodeid]
        return SLOW_UNMEASURED_S if item.get_closest_marker("slow") else 0.0

    long = sorted((i for i in items if seconds(i) >= 3.0), key=seconds, reverse=True)
    long_ids = {id(i) for i in long}
    short = [i for i in items if id(i) not in long_ids]
    ordered: list[pytest.Item] = []
    for item in long:
        ordered.append(item)
        if short:
            ordered.append(short.pop(0))
    items[:] = ordered + short


@pytest.fixture(autouse=True)
def _one_heavy_test_at_a_time(request: pytest.FixtureRequest,
                              tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests marked `heavy` (they keep both cores busy, e.g. a 1,000-target fleet) run one
    at a time across the workers: side by side they starve each other's deadlines."""
    if request.node.get_closest_marker("heavy") is None:
        yield
        return
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, shared by its workers
    with (base / "heavy-tests.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield
