"""`python -m sentinel` is the `sentinel` command."""

import sys

if sys.argv[1:2] == ["run"]:
    # First thing, before the CLI's imports: a SIGHUP while the daemon starts is queued.
    from sentinel.daemon.startsignals import hold_sighup

    hold_sighup()

from sentinel.cli import console  # noqa: E402 (after the signal handler, on purpose)

console()
