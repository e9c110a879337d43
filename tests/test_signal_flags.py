"""Signal handlers only count (daemon/startsignals.py): no lock, so a burst cannot nest them.

A handler that called `threading.Event.set()` was entered again inside itself while it
took the Event's lock; beside stress-ng a burst of SIGHUPs nested it until RecursionError
and the start failed on a rules file "nested too deep". The burst itself needs a starved
machine to show (the suite's SIGHUP test runs beside stress-ng); here, what holds it.
"""

from __future__ import annotations

import dis
import os
import signal

import pytest

from sentinel.daemon import startsignals
from sentinel.daemon.startsignals import Flag


def test_a_flag_counts_and_taking_it_loses_nothing() -> None:
    flag = Flag()
    assert not flag.is_up() and not flag.take()
    flag.raise_(signal.SIGHUP, None)
    flag.raise_(signal.SIGHUP, None)
    assert flag.is_up() and flag.is_up()  # looking keeps it
    assert flag.take() and not flag.take()  # two raises, one reload
    flag.raise_()
    assert flag.take()


def test_the_handler_calls_nothing_that_could_run_another_handler() -> None:
    """Pending handlers run where the interpreter checks for them: at a call (and a lock
    taken inside one). The handler's own code makes no call."""
    calls = [i.opname for i in dis.get_instructions(Flag.raise_) if "CALL" in i.opname]
    assert calls == []


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")
def test_sighup_held_at_start_is_taken_once() -> None:
    before = signal.getsignal(signal.SIGHUP)
    try:
        startsignals.hold_sighup()
        for _ in range(50):
            os.kill(os.getpid(), signal.SIGHUP)
        assert startsignals.take_pending()
        assert not startsignals.take_pending()
    finally:
        signal.signal(signal.SIGHUP, before)
