"""The open-file limit: raised to the hard limit at start, a warning when too low (issue 40)."""

from __future__ import annotations

import resource
import subprocess
import sys

from sentinel.daemon.nofile import MARGIN, needed, too_low


def test_two_sockets_a_target_plus_a_margin() -> None:
    assert needed(5000) == 10_000 + MARGIN
    assert needed(0) == MARGIN


def test_the_warning_names_the_limit_and_what_the_targets_need() -> None:
    warning = too_low(1024, 5000)
    assert warning is not None
    assert "1024" in warning and str(needed(5000)) in warning and "5000 targets" in warning
    assert "LimitNOFILE=65536" in warning


def test_no_warning_when_the_limit_fits() -> None:
    assert too_low(65536, 5000) is None
    assert too_low(1024, 300) is None                 # 856 needed
    assert too_low(resource.RLIM_INFINITY, 10**6) is None
    assert too_low(needed(1000), 1000) is None        # exactly enough
    assert too_low(needed(1000) - 1, 1000) is not None


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    """In a child process (limits are per process): soft 64, hard as inherited."""
    code = ("import resource\n"
            "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))\n"
            "from sentinel.daemon.nofile import INFINITE_CAP, raise_soft_limit\n"
            "want = INFINITE_CAP if hard == resource.RLIM_INFINITY else hard\n"
            "assert raise_soft_limit() == want\n"
            "assert resource.getrlimit(resource.RLIMIT_NOFILE) == (want, hard)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
