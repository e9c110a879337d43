"""A daemon that loses its term and wins the next one acts again (issue 38's HA failure).

Under load a leader's renewal can come late: it steps down, and the same process
takes the next term. Every takeover starts remediation afresh; the second start
used to register the remediation metrics a second time in the daemon's registry
(DuplicateTimeseries), so each takeover failed, handed the lease back and took it
again, hundreds of epochs a minute, with nobody evaluating or paging: the
`resolved page never sent` of the HA end-to-end test on a busy machine.
"""

from __future__ import annotations

import pytest
from fixtures_e2e import wait_for
from ha_helpers import Daemon, write_setup

from sentinel.config import load_config
from sentinel.daemon.app import App

pytestmark = pytest.mark.integration


def test_a_leader_that_lost_its_term_takes_the_next_and_acts(tmp_path, fresh_postgres_url,
                                                               sim, sink):
    write_setup(tmp_path, fresh_postgres_url, {"t0": sim.url}, sink.url)
    # The config file only (listening on port 0); the App runs in-process.
    config = Daemon(tmp_path, "a", port=0).config
    app = App(load_config(config))
    app.start()
    try:
        assert app.lease is not None
        wait_for(app.acting, 30, "the first term")
        epoch = app.lease.epoch
        # The renewal came too late (a stall): the term is lost, the lease thread steps
        # down and, nobody else holding the lease, takes the next term.
        app.lease._lost(app.lease._state, "test: not renewed in time")
        wait_for(lambda: (app.lease.epoch or 0) > epoch and app.acting(), 30, "the next term")
        taken = app.lease.epoch
        assert app.pipeline is not None and app.pipeline.remediator is not None
        # ...and it keeps it: no takeover that fails and hands the lease straight back.
        wait_for(lambda: app.metrics.evaluations.labels("ha")._value.get() >= 3, 30,
                 "evaluations in the new term")
        assert app.lease.epoch == taken and app.acting()
    finally:
        app.stop(2)
