"""The simulator renders its /metrics page again only after a change (issue 38: idle
simulators scraped many times a second re-rendered the same ~350 samples each time)."""

from __future__ import annotations

from sentinel.sim.metrics import ServedRequest, VllmMetrics
from sentinel.sim.state import SimState


def _kv(page: bytes) -> str:
    return next(line for line in page.decode().splitlines()
                if line.startswith("vllm:kv_cache_usage_perc{"))


def test_the_page_is_reused_until_a_change_and_every_change_shows() -> None:
    m = VllmMetrics("gemma", 4096)
    first = m.render()
    assert m.render() is first  # nothing changed: the same bytes, not rendered again
    m.set_state(SimState(kv_cache_usage=0.93))
    after_state = m.render()
    assert after_state is not first and _kv(after_state).endswith(" 0.93")
    assert m.render() is after_state
    m.observe(ServedRequest(engine=0, prompt_tokens=20, generation_tokens=5, cached_tokens=0,
                            max_tokens=5, n=1, finished_reason="length", queue_s=0.0,
                            prefill_s=0.01, token_gaps_s=(0.01,) * 4, e2e_s=0.05))
    after_request = m.render()
    assert after_request is not after_state
    assert b'vllm:generation_tokens_total{engine="0",model_name="gemma"} 5.0' in after_request
