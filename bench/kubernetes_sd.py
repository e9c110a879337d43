"""kubernetes_sd against the fake API on loopback: how long a pod change takes to reach the
add/remove hooks through the watch, and how long the first list of a large namespace takes.

    python bench/kubernetes_sd.py [--pods 2000] [--changes 50]

Loopback and a Python fake server: an upper bound for the client side, not a cluster's
figure (a real API server adds its own watch-cache latency, typically milliseconds).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fakes.kube_server import FakeKube, pod  # noqa: E402

from sentinel.collect.kubernetes_sd import KubernetesDiscovery  # noqa: E402
from sentinel.config.kubernetes import KubernetesSDConfig  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--changes", type=int, default=50)
    args = ap.parse_args()
    api = FakeKube().start()
    for i in range(args.pods):
        api.put("pods", pod(f"vllm-{i}", namespace="inference", labels={"app": "vllm"},
                            ip=f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"))
    seen: dict[str, float] = {}
    gone: dict[str, float] = {}
    cond = threading.Condition()

    def add(t: object) -> None:
        with cond:
            seen[t.name] = time.perf_counter()  # type: ignore[attr-defined]
            cond.notify_all()

    def remove(name: str) -> None:
        with cond:
            gone[name] = time.perf_counter()
            cond.notify_all()

    sd = KubernetesSDConfig.model_validate({
        "name": "bench", "api": {"api_server": api.url}, "namespaces": ["inference"],
        "label_selector": "app=vllm", "port": "http"})
    started = time.perf_counter()
    d = KubernetesDiscovery(sd, add, remove, interval_ms=5000, timeout_ms=4000).start()
    with cond:
        cond.wait_for(lambda: len(seen) >= args.pods and d.synced, timeout=120)
    synced_s = time.perf_counter() - started
    adds, removes = [], []
    for i in range(args.changes):
        name = f"new-{i}"
        t0 = time.perf_counter()
        api.put("pods", pod(name, namespace="inference", labels={"app": "vllm"}, ip="10.9.9.9"))
        with cond:
            cond.wait_for(lambda n=name: n in seen, timeout=10)
        adds.append(seen[name] - t0)
        t0 = time.perf_counter()
        api.remove("pods", "inference", name)
        with cond:
            cond.wait_for(lambda n=name: n in gone, timeout=10)
        removes.append(gone[name] - t0)
    d.stop()
    api.stop()
    ms = [1000 * x for x in adds]
    rms = [1000 * x for x in removes]
    print(f"first list of {args.pods} pods (pages of 500) to synced: {synced_s:.2f} s")
    print(f"pod added → on_add:   median {statistics.median(ms):.1f} ms, "
          f"max {max(ms):.1f} ms over {args.changes}")
    print(f"pod deleted → on_remove: median {statistics.median(rms):.1f} ms, "
          f"max {max(rms):.1f} ms over {args.changes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
