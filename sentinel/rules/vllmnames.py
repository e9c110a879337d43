"""The metric names vLLM exposes, as far as Sentinel knows them (V1 engine, 0.9–0.11).

Read from vLLM's `vllm/v1/metrics/loggers.py`, its docs (design/metrics.md) and
what the simulator serves. `check config` compares every `vllm:` name a rule
selects with this set, so a misspelt name is found without scraping anything;
an unknown name is a warning with a did-you-mean, not an error, because vLLM
adds metrics faster than Sentinel learns them.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable

from sentinel.rules.metriccheck import OPTIONAL, REMOVED, RENAMED, MissingMetric

# Base names (counters without `_total`, histograms without `_bucket/_sum/_count`).
KNOWN_VLLM: frozenset[str] = frozenset({
    # scheduler state
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:engine_sleep_state",
    # KV cache and prefix caching
    "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
    "vllm:external_prefix_cache_queries", "vllm:external_prefix_cache_hits",
    "vllm:mm_cache_queries", "vllm:mm_cache_hits", "vllm:num_preemptions",
    "vllm:cache_config_info", "vllm:lora_requests_info", "vllm:kv_block_lifetime_seconds",
    "vllm:kv_block_idle_before_evict_seconds", "vllm:kv_block_reuse_gap_seconds",
    # tokens and requests
    "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prompt_tokens_cached",
    "vllm:prompt_tokens_recomputed", "vllm:request_success", "vllm:corrupted_requests",
    "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
    "vllm:iteration_tokens_total", "vllm:request_max_num_generation_tokens",
    "vllm:request_params_n", "vllm:request_params_max_tokens",
    "vllm:request_prefill_kv_computed_tokens",
    # latency histograms
    "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds", "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds",
    "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
    # speculative decoding
    "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_per_pos",
})
_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created", "_info")


def base_name(name: str) -> str:
    """`name` without a counter's or histogram's suffix (`_total`, `_bucket`, ...)."""
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in _all_known():
            return name[: -len(suffix)]
    return name


def is_known(name: str) -> bool:
    """Whether `name` (suffix or not) is a vLLM metric Sentinel knows, old names included."""
    return name in _all_known() or base_name(name) in _all_known()


def did_you_mean(name: str) -> str | None:
    """The known name closest to a misspelt `name`, with `name`'s suffix kept; None if none."""
    suffix = next((s for s in _SUFFIXES if name.endswith(s)), "")
    stem = name[: -len(suffix)] if suffix else name
    pool = sorted(_all_known())
    for candidate, keep in ((stem, suffix), (name, "")):
        close = difflib.get_close_matches(candidate, pool, n=1, cutoff=0.75)
        if close:
            return close[0] + keep if close[0] + keep != name else close[0]
    return None


def with_suggestion(m: MissingMetric, present: Callable[[str], bool]) -> str:
    """`m.message()`, and for a name no target has, the closest name that one has."""
    if m.replacement or m.note:
        return m.message()
    guess = did_you_mean(m.metric)
    if guess is not None and present(guess):
        return f"{m.message()}: did you mean {guess}?"
    return m.message()


@functools.cache
def _all_known() -> frozenset[str]:
    """KNOWN_VLLM and the renamed and removed names (metriccheck), which are real too."""
    return KNOWN_VLLM | frozenset(RENAMED) | REMOVED | OPTIONAL
