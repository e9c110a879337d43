"""The same series in Sentinel's store and in a real Prometheus, for the data-source API tests.

Sentinel: a MemoryStore behind the real routes (`api_routes`, `data_source_routes`)
on the real listener (`StatusServer`, port 0). Prometheus: Debian's `prometheus`
over a block `promtool tsdb create-blocks-from openmetrics` wrote from the same
samples.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fixtures_prometheus import prometheus_binary, start_listening
from prometheus_client import CollectorRegistry

from sentinel.api.auth import Auth
from sentinel.api.routes import api_routes, data_source_routes
from sentinel.api.service import ApiService
from sentinel.daemon.http import StatusServer
from sentinel.model import METRIC_NAME, Labels, labels_of
from sentinel.promql.engine import Engine
from sentinel.store.memory import MemoryStore

STEP_MS = 15_000
POINTS = 120  # 30 minutes at 15 s
BUCKETS = ("0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf")

Samples = dict[Labels, list[tuple[int, float]]]


def fleet_samples(t0_ms: int) -> Samples:
    """Deterministic series: counters (one with a reset), gauges, a TTFT histogram, a series
    that stops half way and one that starts late, on two targets."""
    out: Samples = {}

    def put(labels: dict[str, str], value: Callable[[int], float | None]) -> None:
        points = []
        for i in range(POINTS):
            v = value(i)
            if v is not None:
                points.append((t0_ms + i * STEP_MS, v))
        out[labels_of(labels)] = points

    for k, target in enumerate(("tpu-a", "tpu-b")):
        base = {"target": target, "model_name": "gemma", "job": "vllm"}
        put({METRIC_NAME: "vllm:num_requests_waiting", **base},
            lambda i, k=k: float((i * (3 + k)) % 7))
        put({METRIC_NAME: "vllm:kv_cache_usage_perc", **base},
            lambda i, k=k: round(0.1 + 0.8 * abs(math.sin(i / 9 + k)), 4))
        for r, reason in enumerate(("stop", "length", "abort"), start=4):
            put({METRIC_NAME: "vllm:request_success_total", "finished_reason": reason, **base},
                lambda i, k=k, r=r: float(i * (r + k) if i < 80 or k else
                                          (i - 80) * r))  # a reset on tpu-a
        for j, le in enumerate(BUCKETS):
            put({METRIC_NAME: "vllm:time_to_first_token_seconds_bucket", "le": le, **base},
                lambda i, j=j, k=k: float(i * (j + 1) * (2 + k)))
    put({METRIC_NAME: "vllm:num_preemptions_total", "target": "tpu-a", "job": "vllm"},
        lambda i: float(i // 10) if i < POINTS // 2 else None)  # stops half way
    put({METRIC_NAME: "up", "target": "tpu-c", "job": "vllm"},
        lambda i: 1.0 if i >= POINTS // 3 else None)  # starts late
    return out


def openmetrics(samples: Samples) -> str:
    """The samples as an OpenMetrics page with timestamps, for `promtool tsdb`."""
    lines = []
    for labels, points in sorted(samples.items()):
        name = dict(labels)[METRIC_NAME]
        pairs = ",".join(f'{k}="{v}"' for k, v in labels if k != METRIC_NAME)
        lines += [f"{name}{{{pairs}}} {v!r} {t / 1000:.3f}" for t, v in points]
    return "\n".join(lines) + "\n# EOF\n"


def store_of(samples: Samples) -> MemoryStore:
    """A store holding the samples, series created in label order (as a block returns them)."""
    store = MemoryStore(retention_ms=24 * 3600 * 1000)
    for labels, points in sorted(samples.items()):
        for t, v in points:
            store.add(labels, t, v)
    return store


@dataclass
class SentinelApi:
    """The data-source routes over a store on a real listener."""

    server: StatusServer
    url: str

    def stop(self) -> None:
        self.server.stop()


def serve_store(store: MemoryStore, now_ms: Callable[[], int],
                features: frozenset[str] = frozenset(), semantics: int = 3) -> SentinelApi:
    """Sentinel's listener on 127.0.0.1:0 serving the store (reads open, as on loopback),
    queries run by an engine with these experimental PromQL features (`promql_features`)
    and this `promql_semantics` (2: as the Debian Prometheus, 2.42, the tests compare with)."""
    engine = Engine(store, features=features, semantics=semantics)
    service = ApiService(None, query_fn=engine.query,  # type: ignore[arg-type]
                         clock=lambda: now_ms() / 1000)
    auth = Auth([], reads_open=True)
    server = StatusServer("127.0.0.1", 0, CollectorRegistry(), lambda: None,
                          [*api_routes(service, auth), *data_source_routes(service, auth)])
    server.start()
    host, port = server.address
    return SentinelApi(server, f"http://{host}:{port}")


def prometheus_over(samples: Samples, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A real Prometheus whose TSDB holds `samples` (a backfilled block); (process, url)."""
    data = work / "data"
    page = work / "samples.om"
    page.write_text(openmetrics(samples))
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(page),
                    str(data)], check=True, capture_output=True, timeout=120)
    (work / "prometheus.yml").write_text("global: {scrape_interval: 1h}\n")
    return start_listening(
        [prometheus_binary(), f"--config.file={work / 'prometheus.yml'}",
         f"--storage.tsdb.path={data}", "--storage.tsdb.retention.time=100y",
         "--web.listen-address=127.0.0.1:0", "--log.level=info"], work / "prometheus.log")
