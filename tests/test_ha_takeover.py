"""Takeover keeps alert state: a pending alert's `for` does not restart, a firing one does not
re-page (two Apps in one process on a real PostgreSQL; the leader hands over by stopping)."""

from __future__ import annotations

import time

import pytest
from fixtures_e2e import bodies_with_status, wait_for

from sentinel.config import load_config
from sentinel.daemon.app import App

pytestmark = pytest.mark.integration

FOR_S = 4.0
EVAL_S = 1.0
RULES = f"""\
groups:
  - name: ha
    rules:
      - alert: KVCacheHigh
        expr: max by (target) (vllm:kv_cache_usage_perc) > 0.85
        for: {int(FOR_S)}s
"""


def _app(tmp_path, name: str, url: str, sim, sink) -> App:
    (tmp_path / "rules.yaml").write_text(RULES)
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(
        f"database: '{url}'\nlisten: 127.0.0.1:0\nrule_files: [rules.yaml]\n"
        f"evaluation_interval: {int(EVAL_S)}s\nprobe_interval: 0s\nha: {{lease: 3s}}\n"
        f"targets:\n  - {{name: gemma, url: '{sim.url}', scrape_interval: 100ms, "
        f"scrape_timeout: 100ms}}\n"
        f"receivers:\n  - name: oncall\n    webhook: {{url: '{sink.url}', timeout: 2s}}\n"
        "notify: {interval: 100ms, route: {receiver: oncall, group_wait: 0s, "
        "group_interval: 0s, repeat_interval: 1h}}\n")
    app = App(load_config(cfg))
    app.start()
    return app


def test_takeover_keeps_for_and_does_not_re_page(tmp_path, fresh_postgres_url, sim, sink):
    a = _app(tmp_path, "a", fresh_postgres_url, sim, sink)
    b = _app(tmp_path, "b", fresh_postgres_url, sim, sink)
    apps = [a, b]
    try:
        assert a.acting() and not b.acting()
        time.sleep(0.5)
        started = time.monotonic()
        sim.set_state(kv_cache_usage=0.93)
        wait_for(lambda: any(x.state.value == "pending" for x in a.pipeline.rules.active_alerts()),
                 EVAL_S + 2, "the alert pending on the leader")
        time.sleep(1.0)
        a.stop(2)  # hands the lease over mid-`for`
        wait_for(b.acting, 3, "b to take over")
        firing = wait_for(lambda: bodies_with_status(sink, "firing"), FOR_S + EVAL_S + 3,
                          "the firing page")
        took = firing[0][0] - started
        # `for` counted from the first leader's ActiveAt, not restarted at the takeover.
        assert took <= FOR_S + EVAL_S + 0.7, f"fired after {took:.2f}s: `for` restarted"
        # Hand it back while firing: the restored alert is already paged.
        a2 = _app(tmp_path, "a2", fresh_postgres_url, sim, sink)
        apps.append(a2)
        b.stop(2)
        wait_for(a2.acting, 3, "a2 to take over")
        time.sleep(EVAL_S * 3)
        assert len(bodies_with_status(sink, "firing")) == 1, "re-paged after the takeover"
        sim.set_state(kv_cache_usage=0.1)
        wait_for(lambda: bodies_with_status(sink, "resolved"), EVAL_S + 4, "the resolved page")
        assert b.lease.describe().startswith("ha: standby")
        assert "ha: leader (epoch 3" in a2.lease.describe()
    finally:
        for x in apps:
            x.stop(2)
