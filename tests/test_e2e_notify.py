"""End to end through the outbox: a Sentinel killed with SIGKILL in the middle of a send
delivers the message after restart, with the same idempotency key."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from fixtures_e2e import wait_for, write_config
from notify_helpers import LoopbackReceiver

pytestmark = pytest.mark.integration

RULE = """\
groups:
  - name: e2e
    rules:
      - alert: KVCacheHigh
        expr: max by (target) (vllm:kv_cache_usage_perc) > 0.85
        for: 1s
        labels: {severity: page}
        annotations: {summary: "KV cache high on {{ $labels.target }}"}
"""


def _sentinel(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "sentinel", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


def _targets(loopback: LoopbackReceiver) -> set[str]:
    bodies = [r.json() for r in loopback.accepted()]
    return {a["labels"]["target"] for b in bodies for a in b["alerts"]}  # type: ignore[index]


def test_kill_9_mid_send_delivers_after_restart(tmp_path, sim, loopback: LoopbackReceiver):
    cfg = write_config(tmp_path, [("gemma", sim.url), ("llama", sim.url)], loopback.url(), RULE)
    loopback.hold = True  # the receiver takes the request and never answers
    sim.set_state(kv_cache_usage=0.95)
    proc = _sentinel("run", "-c", str(cfg))
    try:
        wait_for(lambda: loopback.requests, 60, "the first request in flight")
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        in_flight = {r.headers["Idempotency-Key"] for r in loopback.requests}
        loopback.hold = False
        loopback.release.set()
        proc = _sentinel("run", "-c", str(cfg))
        # The killed claim's lease (timeout 2s + 5s) runs out, then the message goes again.
        wait_for(lambda: set(loopback.accepted_per_key()) >= in_flight, 60,
                 "the interrupted messages after restart")
        # Both targets' pages arrive: the one in flight at the kill, and the other (which,
        # on a busy machine, may not even have fired before the kill: wait, don't assume).
        wait_for(lambda: _targets(loopback) == {"gemma", "llama"}, 60, "both targets' pages")
        per_key = loopback.accepted_per_key()
        assert set(per_key.values()) == {1}, per_key
    finally:
        proc.kill()
        proc.wait(5)
