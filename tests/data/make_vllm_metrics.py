"""Regenerate vllm_metrics.txt: a /metrics page shaped like vLLM V1's.

The metric names, types, label names and bucket bounds follow
vllm/v1/metrics/loggers.py (PrometheusStatLogger); the page is rendered by
prometheus_client itself, as vLLM does, so the text (HELP/TYPE lines,
`_created` gauges, escaping, float formatting) is what a real server sends.
Run from the repository root: `python tests/data/make_vllm_metrics.py`.
"""

from __future__ import annotations

import random
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

MODEL = "gemma-4"
LABELS = ["model_name", "engine"]
MAX_MODEL_LEN = 8192
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
TPOT_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                   50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]


def buckets_1_2_5(max_value: int) -> list[int]:
    """vLLM's build_1_2_5_buckets."""
    out, exp = [], 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > max_value:
                return out
            out.append(v)
        exp += 1


def build(reg: CollectorRegistry, rng: random.Random) -> None:
    """Register vLLM's V1 metrics on `reg` and feed them a plausible workload."""
    e = (MODEL, "0")
    Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
          LABELS, registry=reg).labels(*e).set(12)
    Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
          LABELS, registry=reg).labels(*e).set(3)
    Gauge("vllm:gpu_cache_usage_perc",
          "GPU KV-cache usage. 1 means 100 percent usage."
          "DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
          LABELS, registry=reg).labels(*e).set(0.4375)
    Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
          LABELS, registry=reg).labels(*e).set(0.4375)
    counters = {
        "vllm:gpu_prefix_cache_queries": ("GPU prefix cache queries, in terms of number of "
                                          "queried tokens.", 912384),
        "vllm:gpu_prefix_cache_hits": ("GPU prefix cache hits, in terms of number of cached "
                                       "tokens.", 401408),
        "vllm:prefix_cache_queries": ("Prefix cache queries, in terms of number of queried "
                                      "tokens.", 912384),
        "vllm:prefix_cache_hits": ("Prefix cache hits, in terms of number of cached tokens.",
                                   401408),
        "vllm:num_preemptions": ("Cumulative number of preemption from the engine.", 7),
        "vllm:prompt_tokens": ("Number of prefill tokens processed.", 912384),
        "vllm:generation_tokens": ("Number of generation tokens processed.", 1834211),
    }
    for name, (doc, value) in counters.items():
        Counter(name, doc, LABELS, registry=reg).labels(*e).inc(value)
    success = Counter("vllm:request_success", "Count of successfully processed requests.",
                      LABELS + ["finished_reason"], registry=reg)
    for reason, n in (("stop", 4021), ("length", 311), ("abort", 9)):
        success.labels(*e, reason).inc(n)
    token_hists = {
        "vllm:request_prompt_tokens": ("Number of prefill tokens processed.", 900),
        "vllm:request_generation_tokens": ("Number of generation tokens processed.", 400),
        "vllm:request_max_num_generation_tokens": (
            "Histogram of maximum number of requested generation tokens.", 1024),
        "vllm:request_params_max_tokens": (
            "Histogram of the max_tokens request parameter.", 1024),
    }
    for name, (doc, mean) in token_hists.items():
        h = Histogram(name, doc, LABELS, buckets=buckets_1_2_5(MAX_MODEL_LEN), registry=reg)
        for _ in range(300):
            h.labels(*e).observe(int(rng.expovariate(1 / mean)))
    Histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
              LABELS, buckets=[1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
              registry=reg).labels(*e).observe(96)
    Histogram("vllm:request_params_n", "Histogram of the n request parameter.", LABELS,
              buckets=[1, 2, 5, 10, 20], registry=reg).labels(*e).observe(1)
    timing = [
        ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
         TTFT_BUCKETS, 0.35),
        ("vllm:time_per_output_token_seconds",
         "Histogram of time per output token in seconds.", TPOT_BUCKETS, 0.03),
        ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
         TPOT_BUCKETS, 0.03),
        ("vllm:time_per_prefill_token_request_seconds",
         "Time spent per token during prefill  phase in seconds",
         [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0], 0.0004),
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
         LATENCY_BUCKETS, 9.0),
        ("vllm:request_queue_time_seconds",
         "Histogram of time spent in WAITING phase for request.", LATENCY_BUCKETS, 0.2),
        ("vllm:request_inference_time_seconds",
         "Histogram of time spent in RUNNING phase for request.", LATENCY_BUCKETS, 8.5),
        ("vllm:request_prefill_time_seconds",
         "Histogram of time spent in PREFILL phase for request.", LATENCY_BUCKETS, 0.3),
        ("vllm:request_decode_time_seconds",
         "Histogram of time spent in DECODE phase for request.", LATENCY_BUCKETS, 8.2),
    ]
    for name, doc, buckets, mean in timing:
        h = Histogram(name, doc, LABELS, buckets=buckets, registry=reg)
        for _ in range(300):
            h.labels(*e).observe(rng.expovariate(1 / mean))
    info = {
        "block_size": "16", "cache_dtype": "auto", "calculate_kv_scales": "False",
        "cpu_offload_gb": "0", "enable_prefix_caching": "True",
        "gpu_memory_utilization": "0.9", "is_attention_free": "False",
        "num_cpu_blocks": "None", "num_gpu_blocks": "27264",
        "num_gpu_blocks_override": "None", "prefix_caching_hash_algo": "builtin",
        "sliding_window": "None", "swap_space": "4", "swap_space_bytes": "4294967296",
        "engine": "0",
    }
    Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
          list(info), registry=reg).labels(**info).set(1)
    build_http(reg, rng)


def build_http(reg: CollectorRegistry, rng: random.Random) -> None:
    """The API server's HTTP metrics (prometheus-fastapi-instrumentator, as vLLM uses)."""
    total = Counter("http_requests", "Total number of requests by method, status and handler.",
                    ["method", "status", "handler"], registry=reg)
    for handler, status, n in (("/v1/chat/completions", "2xx", 4330),
                               ("/v1/chat/completions", "4xx", 12),
                               ("/health", "2xx", 1440), ("/metrics", "2xx", 2880),
                               ("/v1/models", "2xx", 31)):
        total.labels("POST" if handler.startswith("/v1/chat") else "GET", status, handler).inc(n)
    highr = Histogram("http_request_duration_highr_seconds",
                      "Latency with many buckets but no API specific labels. "
                      "Made for more accurate percentile calculations. ",
                      buckets=[0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0,
                               2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0, 30.0, 60.0],
                      registry=reg)
    low = Histogram("http_request_duration_seconds",
                    "Latency with only few buckets by handler. Made to be only used if "
                    "aggregation by handler is important. ",
                    ["method", "handler"], buckets=[0.1, 0.5, 1.0], registry=reg)
    for _ in range(300):
        d = rng.expovariate(1 / 6.0)
        highr.observe(d)
        low.labels("POST", "/v1/chat/completions").observe(d)
        low.labels("GET", "/health").observe(d / 1000)


def main() -> None:
    """Write the page next to this script."""
    reg = CollectorRegistry()
    GCCollector(registry=reg)
    PlatformCollector(registry=reg)
    ProcessCollector(registry=reg)
    build(reg, random.Random(4))
    out = Path(__file__).with_name("vllm_metrics.txt")
    out.write_bytes(generate_latest(reg))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
