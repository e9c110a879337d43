"""Unit tests of the simulator's pure parts: tokenizer, state updates, metric registry."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sentinel.sim import tokens
from sentinel.sim.metrics import ServedRequest, VllmMetrics, build_1_2_5_buckets
from sentinel.sim.openai_api import ApiError, check_context, parse_chat
from sentinel.sim.state import SimState, SimStateError, apply_update
from sentinel.sim.tokens import ChatMessage

MODEL = "google/gemma-4-26B-A4B-it"


def families(page: bytes) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(page.decode())}


def sample(page: bytes, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(page.decode()):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise AssertionError(f"no sample {name} {labels}")


# -- tokens ------------------------------------------------------------------


def test_tokenizer_counts_words_and_punctuation_with_bos() -> None:
    assert tokens.pieces("Hello, world!") == ["Hello", ",", "world", "!"]
    ids = tokens.encode("Hello, world!")
    assert ids[0] == tokens.BOS_ID and len(ids) == 5
    assert ids == tokens.encode("Hello, world!")  # deterministic


def test_chat_count_adds_template_overhead_per_message() -> None:
    one = [ChatMessage("user", "a b c")]
    two = [ChatMessage("system", "x"), ChatMessage("user", "a b c")]
    assert tokens.count_chat(one) == 1 + 3 + tokens.TOKENS_PER_MESSAGE + tokens.TOKENS_PER_CHAT - 1
    assert tokens.count_chat(two) - tokens.count_chat(one) == 1 + tokens.TOKENS_PER_MESSAGE


def test_reply_echoes_last_user_message() -> None:
    reply = "".join(tokens.detokenize(tokens.reply_pieces([ChatMessage("user", "ping now")])))
    assert reply == "This is the Sentinel simulator. You said: ping now"


# -- state -------------------------------------------------------------------


def test_update_changes_only_named_fields() -> None:
    state = apply_update(SimState(num_requests_waiting=4), {"kv_cache_usage": 0.93})
    assert state.kv_cache_usage == 0.93 and state.num_requests_waiting == 4
    assert apply_update(state, {"kv_cache_usage": 1}).kv_cache_usage == 1.0


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        ({"bogus": 1}, "bogus: unknown field"),
        ({"healthy": 1}, "healthy: expected bool"),
        ({"num_requests_waiting": True}, "num_requests_waiting: expected int"),
        ({"num_requests_waiting": 1.5}, "num_requests_waiting: expected int"),
        ({"kv_cache_usage": 1.2}, "kv_cache_usage: must be between 0 and 1"),
        ({"latency_s": -1}, "latency_s: must not be negative"),
        ({"latency_s": "slow"}, "latency_s: expected float"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_update_rejects_bad_input(update: object, expected: str) -> None:
    with pytest.raises(SimStateError, match=expected):
        apply_update(SimState(), update)


def test_update_reports_every_problem_and_changes_nothing() -> None:
    state = SimState()
    with pytest.raises(SimStateError) as err:
        apply_update(state, {"a": 1, "healthy": "no", "kv_cache_usage": 0.5})
    assert "a: unknown field" in str(err.value) and "healthy: expected bool" in str(err.value)
    assert state == SimState()


def test_preemption_counter_cannot_go_down() -> None:
    state = apply_update(SimState(), {"num_preemptions_total": 5})
    with pytest.raises(SimStateError, match="only grows"):
        apply_update(state, {"num_preemptions_total": 4})


# -- request checks -------------------------------------------------------------


def test_context_check_uses_vllm_message() -> None:
    check_context(100, 28, 128)  # exactly fits
    with pytest.raises(ApiError) as err:
        check_context(100, 29, 128)
    assert err.value.body() == {"error": {
        "message": "This model's maximum context length is 128 tokens. However, you requested "
                   "29 output tokens and your prompt contains at least 100 input tokens, for a "
                   "total of at least 129 tokens. Please reduce the length of the input prompt "
                   "or the number of requested output tokens. (parameter=input_tokens, "
                   "value=100)",
        "type": "BadRequestError", "param": "input_tokens", "code": 400}}


def test_parse_chat_rejects_other_model_with_404() -> None:
    with pytest.raises(ApiError) as err:
        parse_chat({"model": "other", "messages": [{"role": "user", "content": "x"}]}, MODEL)
    assert err.value.status == 404 and err.value.message == "The model `other` does not exist."


# -- metrics -------------------------------------------------------------------


def test_buckets_follow_vllm_1_2_5_rule() -> None:
    assert build_1_2_5_buckets(100) == [1, 2, 5, 10, 20, 50, 100]
    assert build_1_2_5_buckets(16384)[-1] == 10000


def test_histograms_carry_vllm_buckets_and_labels() -> None:
    page = VllmMetrics(MODEL, 16384).render()
    ttft = families(page)["vllm:time_to_first_token_seconds"]
    bounds = [s.labels["le"] for s in ttft.samples if s.name.endswith("_bucket")]
    assert bounds[:3] == ["0.001", "0.005", "0.01"] and bounds[-2:] == ["2560.0", "+Inf"]
    assert all(s.labels.get("model_name") == MODEL and s.labels.get("engine") == "0"
               for s in ttft.samples)


def test_observe_counts_tokens_and_latencies() -> None:
    metrics = VllmMetrics(MODEL, 16384)
    metrics.observe(ServedRequest(engine=0, prompt_tokens=20, generation_tokens=5,
                                  cached_tokens=4, max_tokens=64, n=1, finished_reason="length",
                                  queue_s=0.5, prefill_s=0.25, token_gaps_s=(0.1,) * 4,
                                  e2e_s=1.2))
    page = metrics.render()
    assert sample(page, "vllm:prompt_tokens_total") == 20
    assert sample(page, "vllm:generation_tokens_total") == 5
    assert sample(page, "vllm:prefix_cache_hits_total") == 4
    assert sample(page, "vllm:request_success_total", finished_reason="length") == 1
    assert sample(page, "vllm:request_success_total", finished_reason="stop") == 0
    assert sample(page, "vllm:time_to_first_token_seconds_sum") == pytest.approx(0.75)
    assert sample(page, "vllm:inter_token_latency_seconds_count") == 4
    assert sample(page, "vllm:request_decode_time_seconds_sum") == pytest.approx(0.4)
    assert sample(page, "vllm:request_params_max_tokens_bucket", le="100.0") == 1


def test_state_preemptions_grow_counter_by_difference() -> None:
    metrics = VllmMetrics(MODEL, 16384, engines=2)
    metrics.set_state(SimState(num_preemptions_total=3))
    metrics.set_state(SimState(num_preemptions_total=5))
    page = metrics.render()
    assert sample(page, "vllm:num_preemptions_total", engine="1") == 5
