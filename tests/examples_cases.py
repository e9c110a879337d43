"""Issue 48's four failures staged against each shipped example, for bench/examples_e2e.py
(real time) and tests/test_e2e_examples.py (clocks divided by `scale`, examples_config.py).

    fixed      a crash that the example's policy fixes: 0 pages, 1 "fixed" notice where the
               example names a chat receiver (act_first.receiver)
    refused    a crash whose restart is refused; the server stays down 7 min, then a person
               brings it back: 1 page, no resolved message until it serves
    no-policy  a crash no policy covers; the server comes back by itself after 2.5 min:
               1 page, resolved within one evaluation + group_interval of serving again
    down       the server stops answering, no crash line: 1 page

How each example meets them (what its config allows):

- gpu-fleet: gpu-a's container (Docker socket, docker logs): fixed = an EngineCore death
  (the torch.compile cache warm); refused = the same 30 s after a verified restart (the
  policy's 10-min cooldown refuses; a cold cache would not: the example's
  max_time_to_serve, 10 min, allows a GPU's cold expectation, 10 min); no-policy = an
  NCCL error and the process gone (VLLMInterconnectFailure and VLLMTargetDown are in no
  policy); down = gpu-b.
- kubernetes: two pods of a ReplicaSet, found through the (fake) API; no log source, so a
  crash is the pod's server gone: fixed = its pod deleted by the policy and replaced;
  refused = a bare pod (no controller: the restart refuses); no-policy = /health 503 with
  the metrics still served (VLLMHealthCheckFailing is in no policy); down = the pod's
  server gone and its replacement not Ready until 2.5 min (not verified within act-first's
  grace: it pages).
- minimal: one server, no policy, no log source: fixed does not apply; refused = down for
  7 min (nothing to refuse); no-policy = /health 503 for 2.5 min; down = down 2.5 min.
- tpu-v6e: the container (Docker socket, docker logs and Cloud Logging, the TPU API):
  fixed = an HBM OOM with the XLA cache warm; refused = with it empty; no-policy = an ICI
  failure line and /health 503 (VLLMInterconnectFailure, VLLMHealthCheckFailing in no
  policy); down = no line, the cache empty (VLLMTargetDown's restart is refused).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diagnose_helpers import open_incident
from examples_config import Addresses, example_config
from fakes.cloud_logging_server import FakeCloudLogging
from fakes.kube_server import FakeKube, pod
from fakes.tpu_server import FakeTpu

from sentinel.config import Config, load_config
from sentinel.daemon.app import App
from sentinel.demo.sink import WebhookSink
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident
from sentinel.respond.remediate import state
from sentinel.respond.remediate.guards import Decision, Limits, Reason
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import SimServer, start_sim

SCENARIOS = ("fixed", "refused", "no-policy", "down")
REFUSED_DOWN_S, BACK_S = 420.0, 150.0  # production seconds, divided by the scale
NA = {("minimal", "fixed"): "no remediation policy in this example"}
NCCL = ["(EngineCore_DP0 pid=311) ERROR [core.py:710] EngineCore encountered a fatal error.",
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO)"]
ICI = ["(EngineCore_DP0 pid=311) ERROR tpunetd_client.cc:311] Detected failure "
       "SLICE_FAILURE_CHIP_DRIVER_ERROR in session 7f3a"]
NS = "inference"
POD_LABELS = {"app.kubernetes.io/name": "vllm", "pod-template-hash": "abc"}
POD_KW: dict[str, Any] = {
    "env": {"VLLM_XLA_CACHE_PATH": "/xla/cache"},
    "volumes": [{"name": "xla", "persistentVolumeClaim": {"claimName": "xla-cache"}}],
    "mounts": [{"name": "xla", "mountPath": "/xla"}]}
TPU_NODE = "projects/my-project/locations/southamerica-west1-a/nodes/vllm-gemma4-qr-node"
TPU_QR = "projects/my-project/locations/southamerica-west1-a/queuedResources/vllm-gemma4-qr"


@dataclass
class Stage:
    """What one case started: its receivers, its failing server, how to fail and heal it."""

    example: str
    scenario: str
    folder: Path
    scale: int
    pager: WebhookSink = field(default_factory=lambda: WebhookSink().start())
    chat: WebhookSink = field(default_factory=lambda: WebhookSink().start())
    server: SimServer | None = None       # the server that fails (polled for the spans)
    fail: Callable[[], None] = lambda: None
    heal_after_s: float | None = None     # production seconds; None: the policy heals it
    heal: Callable[[], None] = lambda: None
    ready: Callable[[App], bool] = lambda app: True  # before t0 (a log source following)
    prepare: Callable[[Config], None] = lambda config: None  # the database, before the daemon
    stoppers: list[Callable[[], None]] = field(default_factory=list)

    def later(self, delay_s: float, fn: Callable[[], None]) -> None:
        """Run fn after delay_s (the fake Kubernetes controller's reactions)."""
        timer = threading.Timer(delay_s, fn)
        timer.daemon = True
        timer.start()
        self.stoppers.append(timer.cancel)

    def stop(self) -> None:
        """Stop everything the stage started, newest first."""
        for stop in reversed(self.stoppers):
            stop()
        self.pager.stop()
        self.chat.stop()


def stage(example: str, scenario: str, folder: Path, scale: int) -> tuple[Stage, App]:
    """Build the case's world, write its config and start its daemon (not yet failing)."""
    folder.mkdir(parents=True, exist_ok=True)
    s = Stage(example, scenario, folder, scale)
    at = Addresses(folder, pager=s.pager.url, chat=s.chat.url)
    BUILDERS[example](s, at)
    config = load_config(example_config(example, at, scale))
    s.prepare(config)
    app = App(config)
    app.start()
    s.stoppers.append(lambda: app.stop(5))
    return s, app


def _sim(s: Stage, host: str = "127.0.0.1", port: int = 0) -> SimServer:
    sim = start_sim(host=host, port=port)
    s.stoppers.append(sim.stop)
    return sim


def _log_source_up(target: str, source: str) -> Callable[[App], bool]:
    return lambda app: app.metrics.registry.get_sample_value(
        "sentinel_log_source_up", {"target": target, "source": source}) == 1


def _gpu_fleet(s: Stage, at: Addresses) -> None:
    sims = [_sim(s) for _ in range(3)]
    at.targets = {f"gpu-{c}": sim.url for c, sim in zip("abc", sims, strict=True)}
    cache = s.folder / "vllm-cache"  # VLLM_CACHE_ROOT: warm when it holds files
    cache.mkdir(exist_ok=True)
    (cache / "torch_compile_cache.bin").write_bytes(b"\0" * 256)
    if s.scenario == "refused":  # restarted 30 s ago: the policy's 10-min cooldown refuses
        s.prepare = lambda config: restarted_before(config, "gpu-a", "restart-crashed-vllm",
                                                    "docker_restart", 30_000)
    at.docker_socket = str(s.folder / "docker.sock")
    sock = serve_container(sims[0], ContainerSpec(
        accelerator="gpu", compile_cache=str(cache), release_s=0.1, warm_start_s=0.5,
        cold_start_s=1.0), at.docker_socket)
    s.stoppers.append(sock.stop)
    s.ready = _log_source_up("gpu-a", "docker:vllm")
    box = sims[0].container
    s.server = sims[1] if s.scenario == "down" else sims[0]
    if s.scenario in ("fixed", "refused"):
        s.fail = lambda: box.crash("engine_dead")
    elif s.scenario == "no-policy":
        s.fail = lambda: (box.print(NCCL), box.crash("down", log=False))
    else:
        s.fail = lambda: sims[1].set_state(down=True)
    if s.scenario == "down":
        s.heal = lambda: sims[1].set_state(down=False)
    elif s.scenario != "fixed":
        s.heal = box.start  # a person starts it (warm: it serves 0.5 s later)
    s.heal_after_s = {"fixed": None, "refused": REFUSED_DOWN_S}.get(s.scenario, BACK_S)


def _tpu_v6e(s: Stage, at: Addresses) -> None:
    sim = _sim(s)
    at.targets = {"gemma-26b": sim.url}
    cache = s.folder / "xla_cache"
    cache.mkdir(exist_ok=True)
    if s.scenario in ("fixed", "no-policy"):
        (cache / "jit_step_fn-compiled.bin").write_bytes(b"\0" * 1024)
    at.xla_cache = str(cache)
    at.docker_socket = str(s.folder / "docker.sock")
    sock = serve_container(sim, ContainerSpec(
        xla_cache=str(cache), release_s=0.2, warm_start_s=0.3, cold_start_s=1.0),
        at.docker_socket)
    s.stoppers.append(sock.stop)
    logging_api, tpu = FakeCloudLogging("my-project").start(), FakeTpu().start()
    s.stoppers += [logging_api.stop, tpu.stop]
    tpu.set_node(TPU_NODE, "READY", "HEALTHY")
    tpu.set_queued_resource(TPU_QR, "ACTIVE")
    at.google_api = {"logging": logging_api.endpoint, "tpu": tpu.endpoint}
    s.ready = _log_source_up("gemma-26b", "docker:vllm")
    box, s.server = sim.container, sim

    def also_in_cloud_logging(lines: list[str]) -> None:
        for line in lines:  # the TPU worker's stderr reaches Cloud Logging too
            logging_api.add(time.time_ns(), line, node_id="vllm-gemma4-qr-node")

    if s.scenario in ("fixed", "refused"):
        def crash() -> None:
            box.crash("down")
            also_in_cloud_logging([line for _, line in box.output[-20:]])
        s.fail = crash
    elif s.scenario == "no-policy":
        s.fail = lambda: (box.print(ICI), also_in_cloud_logging(ICI),
                          sim.set_state(healthy=False))
        s.heal = lambda: sim.set_state(healthy=True)
    else:
        s.fail = lambda: sim.set_state(down=True)
        s.heal = lambda: sim.set_state(down=False)
    if s.scenario == "refused":
        s.heal = lambda: (box.stop(), box.start())  # a person starts it (cold, 1 s)
    s.heal_after_s = {"fixed": None, "refused": REFUSED_DOWN_S}.get(s.scenario, BACK_S)


def _minimal(s: Stage, at: Addresses) -> None:
    sim = _sim(s)
    at.targets = {"gpu-0": sim.url}
    s.server = sim
    if s.scenario == "no-policy":
        s.fail, s.heal = (lambda: sim.set_state(healthy=False)), (
            lambda: sim.set_state(healthy=True))
    else:
        s.fail, s.heal = (lambda: sim.set_state(down=True)), (lambda: sim.set_state(down=False))
    s.heal_after_s = REFUSED_DOWN_S if s.scenario == "refused" else BACK_S


def _kubernetes(s: Stage, at: Addresses) -> None:
    api = FakeKube().start()
    s.stoppers.append(api.stop)
    at.kube_api = api.url
    first = _sim(s, "127.0.0.2")
    _sim(s, "127.0.0.3", first.port)  # the second pod: serving throughout
    rs = ("ReplicaSet", "vllm-abc", "rs-uid-1")
    api.put("replicasets", {"metadata": {"name": "vllm-abc", "namespace": NS, "uid": rs[2]},
                            "spec": {"selector": {"matchLabels": POD_LABELS}}})
    owner = None if s.scenario == "refused" else rs
    api.put("pods", pod("vllm-abc-1", namespace=NS, ip="127.0.0.2", port=first.port,
                        labels=POD_LABELS, owner=owner, **POD_KW))
    api.put("pods", pod("vllm-abc-2", namespace=NS, ip="127.0.0.3", port=first.port,
                        labels=POD_LABELS, owner=rs, **POD_KW))
    s.server = first
    s.ready = lambda app: app.discovered is not None and not app.discovered.not_synced()

    def replace(ready_after_s: float | None) -> Callable[[dict[str, Any]], None]:
        def on_delete(deleted: dict[str, Any]) -> None:  # the ReplicaSet controller
            api.put("pods", pod("vllm-abc-3", namespace=NS, ip="127.0.0.2", port=first.port,
                                labels=POD_LABELS, owner=rs, ready=False, **POD_KW))
            if ready_after_s is not None:
                s.later(ready_after_s, serving)
        return on_delete

    def serving() -> None:
        first.set_state(down=False, healthy=True)
        if api.get("pods", NS, "vllm-abc-3") is not None:
            api.update("pods", NS, "vllm-abc-3", _ready)

    if s.scenario == "no-policy":
        s.fail, s.heal = (lambda: first.set_state(healthy=False)), (
            lambda: first.set_state(healthy=True))
    else:
        s.fail, s.heal = (lambda: first.set_state(down=True)), serving
    # fixed: the replacement serves 1 s after the delete; down: not before BACK_S
    api.on_delete = replace(1.0 if s.scenario == "fixed" else None)
    s.heal_after_s = {"fixed": None, "refused": REFUSED_DOWN_S}.get(s.scenario, BACK_S)


def restarted_before(config: Config, target: str, policy: str, action: str,
                     ago_ms: int) -> None:
    """A verified restart of `target` by `policy` `ago_ms` before now, written to the
    daemon's database as the engine writes it (its incident resolved)."""
    db = Database(config.database)
    db.upgrade_in_child()
    at = int(time.time() * 1000) - ago_ms
    incident = open_incident(db, target, now_ms=at)
    c = config.remediation
    _, attempt = state.claim(db, state.Claim(incident, target, policy, 1, since_ms=at),
                             lambda *_: Decision(True, Reason.ALLOWED), at, action, False, {})
    assert attempt is not None
    state.mark_acted(db, attempt, at + 1000)
    state.finish(db, attempt, True, "verified", at + 5000,
                 Limits(c.dry_run, c.max_concurrent, c.max_concurrent_percent,
                        c.breaker_failures, c.backoff),
                 recovery_ms=5000, data={"verify": "serving", "served_after_s": 4.0})
    with db.session() as session:
        row = session.get(Incident, incident)
        assert row is not None
        row.status, row.resolved_at = "resolved", ms_to_dt(at + 5000)
    db.dispose()


def _ready(p: dict[str, Any]) -> None:
    p["status"]["conditions"][0]["status"] = "True"


BUILDERS: dict[str, Callable[[Stage, Addresses], None]] = {
    "gpu-fleet": _gpu_fleet, "kubernetes": _kubernetes, "minimal": _minimal,
    "tpu-v6e": _tpu_v6e}
