"""TPU restart hygiene: the stale libtpu lock file a crashed server leaves behind.

Against real peers: a real lock file on disk, the simulator's container behind
its Docker-API unix socket (it dies "already in use" while the lock file is
there, as libtpu does), a stand-in systemctl as a real subprocess, and the
whole daemon for the timeline.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import wait_for

from sentinel.config import load_config
from sentinel.config.remediation import (
    DEFAULT_LIBTPU_LOCKFILE,
    DockerRestartConfig,
    SystemdRestartConfig,
)
from sentinel.daemon.app import App
from sentinel.incidents import queries
from sentinel.respond.remediate import state
from sentinel.respond.remediate.actions import ACTIONS
from sentinel.respond.remediate.actions.tpu_lock import chip_busy, clear_stale_lockfile
from sentinel.respond.remediate.base import ActionContext, TargetInfo
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import SimServer, start_sim

pytestmark = pytest.mark.integration


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:  # unix socket paths are short
        yield Path(d)


def _warm(tmp: Path) -> Path:
    cache = tmp / "xla"
    cache.mkdir()
    (cache / "jit_step_fn.bin").write_bytes(b"\0" * 512)
    return cache


def _container(tmp: Path, sock_dir: Path, lock: Path, log: Path | None = None,
               mounted: bool = True) -> tuple[SimServer, object, str]:
    sim = start_sim()
    path = str(sock_dir / "docker.sock")
    spec = ContainerSpec(xla_cache=str(_warm(tmp)), lockfile=str(lock), lockfile_mounted=mounted,
                         log_file=str(log) if log else None, release_s=0.2, warm_start_s=0.2)
    return sim, serve_container(sim, spec, path), path


def _ctx(sock: str, sim: SimServer, lock: Path | None, **params: object) -> ActionContext:
    p = DockerRestartConfig.model_validate({
        "container": "vllm", "socket": sock, "settle": "150ms",
        "libtpu_lockfile": str(lock) if lock else None, **params})
    return ActionContext(TargetInfo("tpu-a", sim.url, None), {}, p, 10)


def test_the_default_lock_file_is_libtpu_lockfile_in_the_temp_dir() -> None:
    assert DEFAULT_LIBTPU_LOCKFILE == os.path.join(tempfile.gettempdir(), "libtpu_lockfile")
    assert DockerRestartConfig(container="v").libtpu_lockfile == DEFAULT_LIBTPU_LOCKFILE
    assert SystemdRestartConfig(unit="v").libtpu_lockfile == DEFAULT_LIBTPU_LOCKFILE
    assert chip_busy("The TPU is already in use by process with pid 41")
    assert chip_busy("open(/dev/vfio/0): Device or resource busy")
    assert not chip_busy("exec format error")


def test_clearing_reports_what_it_did(tmp_path) -> None:
    lock = tmp_path / "libtpu_lockfile"
    assert clear_stale_lockfile(None) == {}
    assert clear_stale_lockfile(str(lock)) == {"libtpu_lockfile": str(lock),
                                               "lockfile_removed": False}
    lock.write_text("4100\n")
    assert clear_stale_lockfile(str(lock))["lockfile_removed"] is True and not lock.exists()
    lock.mkdir()  # something that cannot be unlinked: reported, not raised
    assert "lockfile_error" in clear_stale_lockfile(str(lock))


def test_a_crash_leaves_the_lock_file_and_only_a_restart_that_clears_it_comes_back(
        tmp_path, sock_dir) -> None:
    lock = tmp_path / "libtpu_lockfile"
    sim, sock, path = _container(tmp_path, sock_dir, lock)
    try:
        old_pid = sim.container.pid
        assert lock.read_text().strip() == str(old_pid)  # the running server holds it
        sim.container.crash("down", log=False)
        assert lock.exists()  # a crash does not release it: stale

        # Leaving it alone: every start dies "already in use"; retried with backoff, in vain.
        stuck = ACTIONS["docker_restart"].run(_ctx(path, sim, None, exit_deadline="1500ms"))
        assert not stuck.ok and "already in use" in stuck.detail
        assert stuck.data["busy_retries"] >= 2 and stuck.data["backoff_s"] > 0
        assert any(w.startswith("lockfile present") for _, w in sim.container.events)

        # Clearing it: removed after the old process is gone, before the start; it comes back.
        events_before = len(sim.container.events)
        outcome = ACTIONS["docker_restart"].run(_ctx(path, sim, lock))
        assert outcome.ok, outcome.detail
        assert outcome.data["lockfile_removed"] is True
        assert outcome.data["libtpu_lockfile"] == str(lock)
        assert f"removed stale {lock}" in outcome.detail
        assert not any(w.startswith("lockfile present")
                       for _, w in sim.container.events[events_before:])
        new_pid = outcome.data["new_pid"]
        assert new_pid != old_pid and lock.read_text().strip() == str(new_pid)  # the new holder
    finally:
        sock.stop()
        sim.stop()


def test_a_clean_stop_releases_the_lock_so_nothing_is_removed(tmp_path, sock_dir) -> None:
    lock = tmp_path / "libtpu_lockfile"
    sim, sock, path = _container(tmp_path, sock_dir, lock)
    try:
        outcome = ACTIONS["docker_restart"].run(_ctx(path, sim, lock))
        assert outcome.ok, outcome.detail
        assert outcome.data["lockfile_removed"] is False and "removed" not in outcome.detail
    finally:
        sock.stop()
        sim.stop()


def test_a_lock_file_inside_the_container_is_never_looked_for_on_the_host(tmp_path,
                                                                           sock_dir) -> None:
    # No mount covers the path: it names a file in the container's own filesystem, and
    # the host's file of the same name belongs to someone else.
    lock = tmp_path / "libtpu_lockfile"
    sim, sock, path = _container(tmp_path, sock_dir, lock, mounted=False)
    try:
        sim.container.stop()
        lock.write_text("999\n")  # stands for a host process's live lock
        sim.container.spec = ContainerSpec(xla_cache=sim.container.spec.xla_cache,
                                           release_s=0.0, warm_start_s=0.1)
        outcome = ACTIONS["docker_restart"].run(_ctx(path, sim, lock))
        assert outcome.ok, outcome.detail
        assert lock.read_text() == "999\n"  # untouched
        assert outcome.data["lockfile_removed"] is False
        assert "not reachable from the host" in outcome.data["lockfile_note"]
    finally:
        sock.stop()
        sim.stop()


# A systemctl stand-in that records, at each call, whether the lock file was there,
# and fails the first STANDIN_FAIL_STARTS starts (the chip still held).
SYSTEMCTL = """#!{python}
import json, os, sys
record, lock = os.environ["STANDIN_RECORD"], os.environ["STANDIN_LOCK"]
with open(record, "a") as f:
    f.write(json.dumps([sys.argv[1:], os.path.exists(lock)]) + "\\n")
if sys.argv[1] == "start":
    calls = sum(1 for line in open(record) if json.loads(line)[0][0] == "start")
    if calls <= int(os.environ.get("STANDIN_FAIL_STARTS", "0")):
        sys.stderr.write("Job for vllm.service failed: The TPU is already in use\\n")
        sys.exit(1)
"""


def test_systemd_restart_clears_the_lock_between_stop_and_start_and_retries_a_busy_start(
        tmp_path, monkeypatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "systemctl"
    tool.write_text(SYSTEMCTL.format(python=sys.executable))
    tool.chmod(0o755)
    record, lock = tmp_path / "calls.jsonl", tmp_path / "libtpu_lockfile"
    lock.write_text("4100\n")  # left by the server that crashed
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_RECORD", str(record))
    monkeypatch.setenv("STANDIN_LOCK", str(lock))
    monkeypatch.setenv("STANDIN_FAIL_STARTS", "1")
    params = SystemdRestartConfig.model_validate({"unit": "vllm.service",
                                                  "libtpu_lockfile": str(lock)})
    ctx = ActionContext(TargetInfo("tpu-a", "http://127.0.0.1:1", str(_warm(tmp_path))), {},
                        params, 10)
    outcome = ACTIONS["systemd_restart"].run(ctx)
    assert outcome.ok, outcome.detail
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert calls == [[["stop", "--", "vllm.service"], True],   # still there while stopping
                     [["start", "--", "vllm.service"], False],  # removed before the start
                     [["start", "--", "vllm.service"], False]]  # the busy start was retried
    assert outcome.data["lockfile_removed"] is True and outcome.data["start_attempts"] == 2
    assert f"removed stale {lock}" in outcome.detail


RULES = """\
groups:
  - name: crashes
    interval: 200ms
    rules:
      - alert: VLLMHBMOutOfMemory
        expr: >-
          sum by (target) (increase(sentinel_log_signature_matches_total{category="hbm_oom"}[3s]))
          > 0
        labels: {severity: critical}
        annotations: {summary: "TPU HBM exhausted on {{ $labels.target }}"}
"""


def _config(folder: Path, sim: SimServer, sock: str, log: Path, lock: Path) -> Path:
    (folder / "rules.yaml").write_text(RULES)
    path = folder / "sentinel.yaml"
    path.write_text(f"""\
database: sqlite:///{folder / 'sentinel.db'}
listen: 127.0.0.1:0
rule_files: [rules.yaml]
targets:
  - name: tpu-a
    url: {sim.url}
    scrape_interval: 1s
    logs: {{files: ['{log}'], poll_interval: 100ms}}
remediation:
  policies:
    - name: restart-on-hbm-oom
      alerts: [VLLMHBMOutOfMemory]
      cooldown: 1m
      steps:
        - docker_restart: {{container: vllm, socket: '{sock}', settle: 200ms,
                           libtpu_lockfile: '{lock}'}}
          timeout: 20s
          verify_deadline: 10s
""")
    return path


def test_the_removal_is_on_the_incident_timeline(tmp_path, sock_dir) -> None:
    lock, log = tmp_path / "libtpu_lockfile", tmp_path / "vllm.log"
    log.write_text("(APIServer pid=1) INFO:     Started server process [1]\n")
    sim, sock, path = _container(tmp_path, sock_dir, lock, log)
    app = App(load_config(_config(tmp_path, sim, path, log, lock)))
    app.start()
    try:
        wait_for(lambda: app.metrics.registry.get_sample_value(
            "sentinel_log_source_up", {"target": "tpu-a", "source": f"file:{log}"}) == 1,
            30, "the log source to join the file")
        httpx.post(f"{sim.url}/sim/crash", json={"mode": "down"}).raise_for_status()
        assert lock.exists() and not sim.container.running  # the crash left it behind
        db = app.pipeline.tracker.db

        def resolved():  # noqa: ANN202
            found = [i for i in queries.list_incidents(db) if i.alertname == "VLLMHBMOutOfMemory"]
            detail = queries.get_incident(db, found[0].id) if found else None
            return detail if detail and detail.incident.status == "resolved" else None

        detail = wait_for(resolved, 60, "the incident to be remediated and resolved")
        # The incident may resolve (the target serves again) a moment before the attempt
        # records its outcome: wait for that record, then read the timeline again.
        (attempt,) = wait_for(lambda: [a for a in state.attempts(db, detail.incident.id)
                                       if a.status != "running"], 60, "the attempt's outcome")
        assert attempt.status == "succeeded"
        detail = queries.get_incident(db, detail.incident.id)
        outcome = next(e for e in detail.timeline
                       if e.kind == "action" and e.data.get("phase") == "outcome")
        assert outcome.data["lockfile_removed"] is True
        assert outcome.data["libtpu_lockfile"] == str(lock)
        assert f"removed stale {lock}" in outcome.message
        assert not any(w.startswith("lockfile present") for _, w in sim.container.events)
    finally:
        app.stop(2)
        sock.stop()
        sim.stop()
