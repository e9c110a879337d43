"""Actions against real peers: stand-in systemctl and tools as real subprocesses on PATH,
docker_restart through the simulator's Docker-API unix socket, cache backup and restore."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from sentinel.config.remediation import (
    CommandConfig,
    DockerRestartConfig,
    SystemdRestartConfig,
    XlaCacheBackupConfig,
)
from sentinel.respond.remediate.actions import ACTIONS
from sentinel.respond.remediate.base import ActionContext, TargetInfo
from sentinel.respond.remediate.docker_api import DockerClient, DockerError
from sentinel.respond.remediate.guards import Reason
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import DockerSocket, serve_container
from sentinel.sim.server import SimServer, start_sim

pytestmark = pytest.mark.integration

# Records its argv and environment-chosen exit status, like a real tool would be observed.
STANDIN = """#!{python}
import json, os, sys
with open(os.environ["STANDIN_RECORD"], "a") as f:
    f.write(json.dumps(sys.argv) + "\\n")
sys.stderr.write(os.environ.get("STANDIN_STDERR", ""))
sys.exit(int(os.environ.get("STANDIN_EXIT", "0")))
"""


class Tool:
    """A stand-in executable in a private bin folder on PATH."""

    def __init__(self, tmp: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
        bin_dir = tmp / "bin"
        bin_dir.mkdir(exist_ok=True)
        self.path = bin_dir / name
        self.path.write_text(STANDIN.format(python=sys.executable))
        self.path.chmod(0o755)
        self.record = tmp / f"{name}.jsonl"
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("STANDIN_RECORD", str(self.record))

    def runs(self) -> list[list[str]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]


def warm_dir(tmp: Path, name: str = "xla") -> Path:
    d = tmp / name
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "graph-1.bin").write_bytes(b"x" * 100)
    (d / "graph-2.bin").write_bytes(b"y" * 50)
    return d


def target(tmp: Path, cache: Path | None = None, url: str = "http://127.0.0.1:1") -> TargetInfo:
    return TargetInfo("tpu-a", url, str(cache) if cache else None)


# -- systemd_restart and command: real subprocesses -----------------------------------


def test_systemd_restart_runs_systemctl_with_an_argv_list(tmp_path, monkeypatch) -> None:
    tool = Tool(tmp_path, "systemctl", monkeypatch)
    params = SystemdRestartConfig.model_validate({"unit": "vllm-{target}.service",
                                                  "libtpu_lockfile": str(tmp_path / "lock")})
    ctx = ActionContext(target(tmp_path, warm_dir(tmp_path)), {"target": "tpu-a"}, params, 10)
    outcome = ACTIONS["systemd_restart"].run(ctx)
    assert outcome.ok, outcome.detail
    # Stop and start, not restart: the stale libtpu lock file is cleared in between.
    assert tool.runs() == [[str(tool.path), "stop", "--", "vllm-tpu-a.service"],
                           [str(tool.path), "start", "--", "vllm-tpu-a.service"]]
    assert outcome.data["warm"] is True and outcome.data["exit_code"] == 0


def test_systemd_restart_failure_keeps_stderr(tmp_path, monkeypatch) -> None:
    Tool(tmp_path, "systemctl", monkeypatch)
    monkeypatch.setenv("STANDIN_EXIT", "5")
    monkeypatch.setenv("STANDIN_STDERR", "Failed to restart vllm.service: Unit not found.\n")
    params = SystemdRestartConfig.model_validate({"unit": "vllm.service",
                                                  "libtpu_lockfile": None})
    outcome = ACTIONS["systemd_restart"].run(
        ActionContext(target(tmp_path, warm_dir(tmp_path)), {}, params, 10))
    assert not outcome.ok
    assert "exited 5" in outcome.detail and "Unit not found" in outcome.detail


def test_systemd_restart_check_reports_a_cold_cache(tmp_path, monkeypatch) -> None:
    tool = Tool(tmp_path, "systemctl", monkeypatch)
    (tmp_path / "empty").mkdir()
    params = SystemdRestartConfig.model_validate({"unit": "vllm.service",
                                                  "libtpu_lockfile": None})
    ctx = ActionContext(target(tmp_path, tmp_path / "empty"), {}, params, 10)
    check = ACTIONS["systemd_restart"].check(ctx)
    # The check describes what the restart finds; the engine judges its cost.
    assert check.ok and check.data["warm"] is False and check.data["accelerator"] == "tpu"
    assert "COLD" in check.summary and "empty" in check.summary
    assert tool.runs() == []  # a check runs nothing



def test_command_substitutes_labels_into_the_argv_template(tmp_path, monkeypatch) -> None:
    tool = Tool(tmp_path, "vllm-ctl", monkeypatch)
    params = CommandConfig.model_validate(
        {"argv": [str(tool.path), "restart", "--node={node}", "{target}"]})
    ctx = ActionContext(target(tmp_path), {"target": "tpu-a", "node": "vllm-1"}, params, 10)
    outcome = ACTIONS["command"].run(ctx)
    assert outcome.ok, outcome.detail
    assert tool.runs() == [[str(tool.path), "restart", "--node=vllm-1", "tpu-a"]]


@pytest.mark.parametrize("value", ["--force", "a b", "../etc", "x;rm -rf /", ""])
def test_command_refuses_label_values_that_are_not_plain_names(tmp_path, monkeypatch,
                                                               value: str) -> None:
    tool = Tool(tmp_path, "vllm-ctl", monkeypatch)
    params = CommandConfig.model_validate({"argv": [str(tool.path), "restart", "{target}"]})
    ctx = ActionContext(target(tmp_path), {"target": value}, params, 10)
    check = ACTIONS["command"].check(ctx)
    assert (check.ok, check.reason) == (False, Reason.PRECONDITION)
    assert not ACTIONS["command"].run(ctx).ok and tool.runs() == []


def test_command_timeout_is_a_failed_outcome(tmp_path) -> None:
    params = CommandConfig.model_validate({"argv": ["/bin/sleep", "5"]})
    outcome = ACTIONS["command"].run(ActionContext(target(tmp_path), {}, params, 0.2))
    assert not outcome.ok and "timed out" in outcome.detail


# -- docker_restart through the simulator's socket -----------------------------------------


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # Unix socket paths are limited to ~107 bytes: pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="snt") as d:
        yield Path(d)


def sim_container(sock_dir: Path, cache: Path | None, **spec: object
                  ) -> tuple[SimServer, DockerSocket, str]:
    sim = start_sim()
    path = str(sock_dir / "docker.sock")
    sock = serve_container(sim, ContainerSpec(xla_cache=str(cache) if cache else None, **spec),
                           path)
    return sim, sock, path


def docker_ctx(path: str, cache_target: TargetInfo, allow_cold: bool = False,
               **params: object) -> ActionContext:
    p = DockerRestartConfig.model_validate({"container": "{container}", "socket": path,
                                            "settle": "150ms", "libtpu_lockfile": None,
                                            **params})
    return ActionContext(cache_target, {"container": "vllm"}, p, 10, allow_cold)


def test_docker_api_subset_shapes(tmp_path, sock_dir) -> None:
    sim, sock, path = sim_container(sock_dir, warm_dir(tmp_path))
    try:
        with DockerClient(path) as docker:
            info = docker.inspect("vllm")
            assert info.running and info.pid > 0 and info.status == "running"
            assert info.env["VLLM_XLA_CACHE_PATH"] == str(tmp_path / "xla")
            assert docker.stop("vllm", 1) is True
            assert docker.stop("vllm", 1) is False  # 304: already stopped
            stopped = docker.inspect("vllm")
            assert (stopped.running, stopped.pid, stopped.status) == (False, 0, "exited")
            with pytest.raises(DockerError, match="No such container: nope") as err:
                docker.inspect("nope")
            assert err.value.status == 404
        with httpx.Client(transport=httpx.HTTPTransport(uds=path)) as raw:
            assert raw.get("http://docker/v1.41/_ping").text == "OK"
    finally:
        sock.stop()
        sim.stop()


def test_docker_restart_waits_for_the_chip_and_comes_back_warm(tmp_path, sock_dir) -> None:
    cache = warm_dir(tmp_path)
    sim, sock, path = sim_container(sock_dir, cache, release_s=0.6, warm_start_s=0.1)
    try:
        ctx = docker_ctx(path, target(tmp_path, url=sim.url))
        check = ACTIONS["docker_restart"].check(ctx)
        assert check.ok and "warm: XLA cache" in check.summary and "2 files" in check.summary
        outcome = ACTIONS["docker_restart"].run(ctx)
        assert outcome.ok, outcome.detail
        # The chip was still held after the stop: the first start(s) died, a later one stayed.
        assert outcome.data["starts"] >= 2
        died = [w for _, w in sim.container.events if w.startswith("died: TPU in use")]
        assert died and len(died) == outcome.data["starts"] - 1
        wait_serving = [w for _, w in sim.container.events if w.startswith("loading warm")]
        assert wait_serving
    finally:
        sock.stop()
        sim.stop()


def test_a_naive_restart_on_tpu_dies_with_the_chip_busy(tmp_path, sock_dir) -> None:
    sim, sock, path = sim_container(sock_dir, warm_dir(tmp_path), release_s=0.5)
    log = tmp_path / "vllm.log"
    sim.container.spec = ContainerSpec(xla_cache=str(tmp_path / "xla"), log_file=str(log),
                                       release_s=0.5)
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=path)) as raw:
            assert raw.post("http://docker/containers/vllm/restart").status_code == 204
        with DockerClient(path) as docker:
            info = docker.inspect("vllm")
        assert not info.running and "already in use by process with pid" in info.error
        assert "The TPU is already in use" in log.read_text()
    finally:
        sock.stop()
        sim.stop()


def test_docker_restart_check_reports_a_cold_cache(tmp_path, sock_dir) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    sim, sock, path = sim_container(sock_dir, empty)
    try:
        check = ACTIONS["docker_restart"].check(docker_ctx(path, target(tmp_path)))
        assert check.ok and check.data["warm"] is False and check.data["accelerator"] == "tpu"
        assert "COLD" in check.summary and "is empty" in check.data["warm_why"]
        assert sim.container.times("POST") == []  # nothing was asked of Docker
    finally:
        sock.stop()
        sim.stop()


def test_docker_restart_check_knows_a_gpu_container(tmp_path, sock_dir) -> None:
    compiled = tmp_path / "vllm-cache"
    compiled.mkdir()
    sim, sock, path = sim_container(sock_dir, None, accelerator="gpu",
                                    compile_cache=str(compiled))
    try:
        ctx = docker_ctx(path, target(tmp_path))
        check = ACTIONS["docker_restart"].check(ctx)
        # --gpus all, NVIDIA_VISIBLE_DEVICES: a GPU; no word of XLA.
        assert check.ok and check.data["accelerator"] == "gpu"
        assert check.data["warm"] is False and "torch.compile cache" in check.data["warm_why"]
        assert "XLA" not in check.summary
        (compiled / "graph.bin").write_bytes(b"x")
        assert ACTIONS["docker_restart"].check(ctx).data["warm"] is True
    finally:
        sock.stop()
        sim.stop()



def test_docker_restart_restores_a_durable_cache_copy_first(tmp_path, sock_dir) -> None:
    durable = warm_dir(tmp_path, "durable")
    shm = tmp_path / "shm-xla"
    shm.mkdir()  # emptied by a node restart
    sim, sock, path = sim_container(sock_dir, shm, warm_start_s=0.05, release_s=0.0)
    try:
        ctx = docker_ctx(path, target(tmp_path), restore_from=str(durable))
        outcome = ACTIONS["docker_restart"].run(ctx)
        assert outcome.ok, outcome.detail
        assert outcome.data["restored_files"] == 2
        assert (shm / "sub" / "graph-1.bin").read_bytes() == b"x" * 100
        assert any(w.startswith("loading warm") for _, w in sim.container.events)
    finally:
        sock.stop()
        sim.stop()


def test_docker_restart_without_the_cache_env_is_cold_on_a_tpu(tmp_path, sock_dir) -> None:
    sim, sock, path = sim_container(sock_dir, None)
    try:
        check = ACTIONS["docker_restart"].check(docker_ctx(path, target(tmp_path)))
        assert check.data["warm"] is False and check.data["accelerator"] == "tpu"
        assert "VLLM_XLA_CACHE_PATH" in check.summary
    finally:
        sock.stop()
        sim.stop()



# -- xla_cache_backup ------------------------------------------------------------------


def test_backup_then_restore_round_trip(tmp_path) -> None:
    cache = warm_dir(tmp_path)
    durable = tmp_path / "durable" / "xla"
    backup = XlaCacheBackupConfig.model_validate({"durable": str(durable)})
    out = ACTIONS["xla_cache_backup"].run(ActionContext(target(tmp_path, cache), {}, backup, 10))
    assert out.ok and out.data["copied"] == 2
    for f in (cache / "sub" / "graph-1.bin", cache / "graph-2.bin"):
        f.unlink()
    restore = XlaCacheBackupConfig.model_validate({"durable": str(durable),
                                                   "direction": "restore"})
    out = ACTIONS["xla_cache_backup"].run(ActionContext(target(tmp_path, cache), {}, restore, 10))
    assert out.ok and (cache / "graph-2.bin").read_bytes() == b"y" * 50


def test_backup_of_an_empty_cache_never_overwrites_a_good_copy(tmp_path) -> None:
    durable = warm_dir(tmp_path, "durable")
    (tmp_path / "empty").mkdir()
    backup = XlaCacheBackupConfig.model_validate({"durable": str(durable)})
    out = ACTIONS["xla_cache_backup"].run(
        ActionContext(target(tmp_path, tmp_path / "empty"), {}, backup, 10))
    assert not out.ok and (durable / "graph-2.bin").exists()


def test_docker_restart_refuses_to_restart_over_a_start_since_the_failure(tmp_path, sock_dir
                                                                         ) -> None:
    """Issue 48 (tpu-v6e example, refused crash): a person starts the container the policy
    refused to restart cold; the start fills the cache, and a restart now (warm) would kill
    a start that serves or is about to. A container started after the failure began is
    someone else's start: refused, and nothing is asked of Docker."""
    sim, sock, path = sim_container(sock_dir, warm_dir(tmp_path))
    try:
        sim.container.crash("down")
        failed_ms = int(time.time() * 1000)
        base = docker_ctx(path, target(tmp_path))
        assert ACTIONS["docker_restart"].check(replace(base, since_ms=failed_ms)).ok  # exited
        time.sleep(0.01)  # StartedAt strictly after the failure, at Docker's resolution
        sim.container.start()  # the person
        check = ACTIONS["docker_restart"].check(replace(base, since_ms=failed_ms))
        assert check.reason is Reason.STARTED_ELSEWHERE and "not by Sentinel" in check.summary
        # Unknown since (a person asked through the API or the CLI): no such refusal.
        assert ACTIONS["docker_restart"].check(base).ok
        assert sim.container.times("POST") == []
    finally:
        sock.stop()
        sim.stop()
