"""vLLM's Prometheus metrics, built the way vLLM builds them.

Names, help texts, label names, bucket boundaries and types follow
`vllm/v1/metrics/loggers.py` (PrometheusStatLogger) of the current V1
engine: a `model_name` and `engine` label on every series, one child per
data-parallel engine, prometheus_client on a registry of our own (so
counters and histograms carry `_created`, as a real server's page does).

`legacy=True` renders the names of the older V1 releases (0.8/0.9):
`vllm:gpu_cache_usage_perc`, `vllm:gpu_prefix_cache_*`,
`vllm:time_per_output_token_seconds`, and no metric added since.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from sentinel.sim.state import SimState

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

LABELS = ("model_name", "engine")

FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
LEGACY_FINISH_REASONS = ("stop", "length", "abort")

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TOKEN_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                         1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                           40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)

# A page a scraper must refuse: an unclosed label set, a bad value, a stray token.
GARBAGE_PAGE = (
    b"# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    b"# TYPE vllm:num_requests_running gauge\n"
    b'vllm:num_requests_running{model_name="sim",engine="0" 1.0\n'
    b"vllm:kv_cache_usage_perc{} not-a-number\n"
    b"\x00garbage }{\n"
)


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to `max_value`, as vLLM sizes its token-count histograms."""
    buckets: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


@dataclass(frozen=True)
class ServedRequest:
    """One finished chat request as the engine's stats would report it (durations in seconds)."""

    engine: int
    prompt_tokens: int
    generation_tokens: int
    cached_tokens: int
    max_tokens: int | None
    n: int
    finished_reason: str
    queue_s: float
    prefill_s: float
    token_gaps_s: tuple[float, ...]
    e2e_s: float

    @property
    def ttft_s(self) -> float:
        """Time to first token: waiting plus prefill."""
        return self.queue_s + self.prefill_s

    @property
    def decode_s(self) -> float:
        """Time from the first to the last generated token."""
        return sum(self.token_gaps_s)


@dataclass(frozen=True)
class CacheConfig:
    """The labels of `vllm:cache_config_info` (vLLM renders every CacheConfig field as a string)."""

    block_size: int = 32
    cache_dtype: str = "fp8"
    gpu_memory_utilization: float = 0.9
    num_gpu_blocks: int = 8192
    enable_prefix_caching: bool = True

    def labels(self) -> dict[str, str]:
        """The info labels, stringified as vLLM's metrics_info() does."""
        return {
            "block_size": str(self.block_size),
            "cache_dtype": self.cache_dtype,
            "calculate_kv_scales": "False",
            "cpu_offload_gb": "0",
            "enable_prefix_caching": str(self.enable_prefix_caching),
            "gpu_memory_utilization": str(self.gpu_memory_utilization),
            "is_attention_free": "False",
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(self.num_gpu_blocks),
            "num_gpu_blocks_override": "None",
            "prefix_caching_hash_algo": "sha256",
            "sliding_window": "None",
            "swap_space": "4",
        }


class VllmMetrics:
    """The /metrics page of one simulated vLLM server (thread-safe, as prometheus_client is)."""

    def __init__(self, model: str, max_model_len: int, engines: int = 1,
                 legacy: bool = False, cache_config: CacheConfig | None = None) -> None:
        if engines < 1:
            raise ValueError(f"engines must be at least 1, got {engines}")
        self.registry = CollectorRegistry(auto_describe=True)
        self.model = model
        self.legacy = legacy
        self.engines = tuple(str(i) for i in range(engines))
        self._preemptions_seen = 0
        self._token_buckets = build_1_2_5_buckets(max_model_len)
        self._per_engine: list[Gauge | Counter | Histogram] = []
        self._build_gauges(cache_config or CacheConfig())
        self._build_counters()
        self._build_histograms()
        # A fresh server shows zero-valued series for every engine, as vLLM
        # does right after start-up.
        for metric in self._per_engine:
            for engine in self.engines:
                metric.labels(self.model, engine)
        # The page is rendered again only after a change (set_state, observe): rendering
        # ~350 samples costs ~3 ms of CPU, and the tests scrape idle simulators many
        # times a second (two HA daemons x ten targets: a tenth of a core for the same bytes).
        self._version = 0
        self._rendered: tuple[int, bytes] | None = None
        self._render_lock = threading.Lock()

    # -- construction -----------------------------------------------------

    def _gauge(self, name: str, doc: str) -> Gauge:
        gauge = Gauge(name, doc, LABELS, registry=self.registry)
        self._per_engine.append(gauge)
        return gauge

    def _counter(self, name: str, doc: str) -> Counter:
        counter = Counter(name, doc, LABELS, registry=self.registry)
        self._per_engine.append(counter)
        return counter

    def _histogram(self, name: str, doc: str, buckets: Sequence[float]) -> Histogram:
        histogram = Histogram(name, doc, LABELS, buckets=buckets, registry=self.registry)
        self._per_engine.append(histogram)
        return histogram

    def _build_gauges(self, cache_config: CacheConfig) -> None:
        self.running = self._gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = self._gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.sleep_state: Gauge | None = None
        if self.legacy:
            self.kv_usage = self._gauge(
                "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.")
        else:
            self.kv_usage = self._gauge(
                "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
            self.sleep_state = Gauge(
                "vllm:engine_sleep_state",
                "Engine sleep state; awake = 0 means engine is sleeping; "
                "awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; "
                "discard_all = 1 means sleep level 2.",
                (*LABELS, "sleep_state"), registry=self.registry)
            for engine in self.engines:
                for state in ("awake", "weights_offloaded", "discard_all"):
                    self.sleep_state.labels(self.model, engine, state).set(
                        1 if state == "awake" else 0)  # type: ignore[union-attr]
        info = cache_config.labels()
        if self.legacy:
            Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                  tuple(info), registry=self.registry).labels(**info).set(1)
            return
        info_gauge = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                           (*info, "engine"), registry=self.registry)
        for engine in self.engines:
            info_gauge.labels(**info, engine=engine).set(1)

    def _build_counters(self) -> None:
        prefix = "vllm:gpu_prefix_cache" if self.legacy else "vllm:prefix_cache"
        unit = "blocks" if self.legacy else "tokens"
        gpu = "GPU prefix" if self.legacy else "Prefix"
        self.prefix_queries = self._counter(
            f"{prefix}_queries", f"{gpu} cache queries, in terms of number of queried {unit}.")
        self.prefix_hits = self._counter(
            f"{prefix}_hits", f"{gpu} cache hits, in terms of number of cached {unit}.")
        if not self.legacy:
            self._build_modern_cache_counters()
        self.preemptions = self._counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = self._counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.")
        if not self.legacy:
            self.prompt_cached = self._counter(
                "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).")
            self._counter("vllm:prompt_tokens_recomputed",
                          "Number of cached tokens recomputed for forward pass.")
        self.generation_tokens = self._counter(
            "vllm:generation_tokens", "Number of generation tokens processed.")
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               (*LABELS, "finished_reason"), registry=self.registry)
        for reason in LEGACY_FINISH_REASONS if self.legacy else FINISH_REASONS:
            for engine in self.engines:
                self.success.labels(self.model, engine, reason)

    def _build_modern_cache_counters(self) -> None:
        self._counter("vllm:external_prefix_cache_queries",
                      "External prefix cache queries from KV connector cross-instance cache "
                      "sharing, in terms of number of queried tokens.")
        self._counter("vllm:external_prefix_cache_hits",
                      "External prefix cache hits from KV connector cross-instance cache "
                      "sharing, in terms of number of cached tokens.")
        self._counter("vllm:mm_cache_queries",
                      "Multi-modal cache queries, in terms of number of queried items.")
        self._counter("vllm:mm_cache_hits",
                      "Multi-modal cache hits, in terms of number of cached items.")

    def _build_histograms(self) -> None:
        tokens = self._token_buckets
        self.h_prompt = self._histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens)
        self.h_generation = self._histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens)
        self.h_iteration = self._histogram(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
            ITERATION_TOKEN_BUCKETS)
        self.h_max_generation = self._histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.", tokens)
        self.h_n = self._histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", PARAMS_N_BUCKETS)
        self.h_max_tokens = self._histogram(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
            tokens)
        self.h_ttft = self._histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            TTFT_BUCKETS)
        if self.legacy:
            self.h_itl = self._histogram(
                "vllm:time_per_output_token_seconds",
                "Histogram of time per output token in seconds.", TOKEN_LATENCY_BUCKETS)
        else:
            self.h_itl = self._histogram(
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.", TOKEN_LATENCY_BUCKETS)
            self.h_tpot = self._histogram(
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                TOKEN_LATENCY_BUCKETS)
        self._build_phase_histograms()

    def _build_phase_histograms(self) -> None:
        def phase(name: str, doc: str) -> Histogram:
            return self._histogram(name, doc, REQUEST_LATENCY_BUCKETS)

        self.h_e2e = phase("vllm:e2e_request_latency_seconds",
                           "Histogram of e2e request latency in seconds.")
        self.h_queue = phase("vllm:request_queue_time_seconds",
                             "Histogram of time spent in WAITING phase for request.")
        self.h_inference = phase("vllm:request_inference_time_seconds",
                                 "Histogram of time spent in RUNNING phase for request.")
        self.h_prefill = phase("vllm:request_prefill_time_seconds",
                               "Histogram of time spent in PREFILL phase for request.")
        self.h_decode = phase("vllm:request_decode_time_seconds",
                              "Histogram of time spent in DECODE phase for request.")
        if not self.legacy:
            self.h_prefill_kv = self._histogram(
                "vllm:request_prefill_kv_computed_tokens",
                "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
                self._token_buckets)

    # -- updates ----------------------------------------------------------

    def set_state(self, state: SimState) -> None:
        """Show `state` on every engine; the preemption counter grows by the difference."""
        delta = state.num_preemptions_total - self._preemptions_seen
        self._preemptions_seen = state.num_preemptions_total
        for engine in self.engines:
            self.running.labels(self.model, engine).set(state.num_requests_running)
            self.waiting.labels(self.model, engine).set(state.num_requests_waiting)
            self.kv_usage.labels(self.model, engine).set(state.kv_cache_usage)
            if delta > 0:
                self.preemptions.labels(self.model, engine).inc(delta)
            if self.sleep_state is not None:
                # Level 1 sleep (weights offloaded), as POST /sleep?level=1 leaves it.
                for name, on in (("awake", not state.sleeping),
                                 ("weights_offloaded", state.sleeping)):
                    self.sleep_state.labels(self.model, engine, name).set(int(on))
        self._changed()

    def observe(self, req: ServedRequest) -> None:
        """Count one finished request on its engine, as vLLM's record() does."""
        engine = str(req.engine)
        labels = (self.model, engine)
        self.prefix_queries.labels(*labels).inc(req.prompt_tokens)
        self.prefix_hits.labels(*labels).inc(req.cached_tokens)
        self.prompt_tokens.labels(*labels).inc(req.prompt_tokens)
        self.generation_tokens.labels(*labels).inc(req.generation_tokens)
        self.h_iteration.labels(*labels).observe(req.prompt_tokens + req.generation_tokens)
        self.h_max_generation.labels(*labels).observe(req.max_tokens or req.generation_tokens)
        self.h_n.labels(*labels).observe(req.n)
        self.h_ttft.labels(*labels).observe(req.ttft_s)
        for gap in req.token_gaps_s:
            self.h_itl.labels(*labels).observe(gap)
        self.success.labels(self.model, engine, req.finished_reason).inc()
        self.h_e2e.labels(*labels).observe(req.e2e_s)
        self.h_queue.labels(*labels).observe(req.queue_s)
        self.h_prefill.labels(*labels).observe(req.prefill_s)
        self.h_inference.labels(*labels).observe(req.prefill_s + req.decode_s)
        self.h_decode.labels(*labels).observe(req.decode_s)
        self.h_prompt.labels(*labels).observe(req.prompt_tokens)
        self.h_generation.labels(*labels).observe(req.generation_tokens)
        if req.max_tokens:
            self.h_max_tokens.labels(*labels).observe(req.max_tokens)
        if not self.legacy:
            self.prompt_cached.labels(*labels).inc(req.cached_tokens)
            self.h_prefill_kv.labels(*labels).observe(req.prompt_tokens - req.cached_tokens)
            if req.generation_tokens > 1:
                self.h_tpot.labels(*labels).observe(req.decode_s / (req.generation_tokens - 1))
        self._changed()

    def _changed(self) -> None:
        """A series changed (called after the change): the next render renders."""
        with self._render_lock:
            self._version += 1

    def render(self) -> bytes:
        """The exposition page (text format 0.0.4); the same bytes until a change."""
        with self._render_lock:
            version, cached = self._version, self._rendered
        if cached is not None and cached[0] == version:
            return cached[1]
        body = generate_latest(self.registry)
        with self._render_lock:
            if self._version == version:  # no change finished while rendering
                self._rendered = (version, body)
        return body
