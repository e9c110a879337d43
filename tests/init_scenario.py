"""`sentinel init` from an empty folder to a caught crash, for any `sentinel` executable.

Shared by tests/test_init.py (this checkout) and tests/test_packaging.py (a built wheel
installed in a fresh venv): two simulators, one of them a container on its own Docker
socket; init writes the config; check config passes it; run catches the container's
crash and restarts it. Waits on events (the incident in the API, the container's
restart), never on time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

import httpx
from fixtures_e2e import wait_for
from fixtures_ports import free_port

from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import start_sim

# A loaded 2-core machine: a default config scrapes and evaluates every 15 s.
DEADLINE_S = 300


def init_then_catch_a_crash(sentinel: list[str], folder: Path, env: dict[str, str]) -> None:
    """The whole first hour with `sentinel` (argv prefix), in the empty `folder`."""
    assert not any(folder.iterdir())
    plain, boxed = start_sim(), start_sim()
    with tempfile.TemporaryDirectory(prefix="snt") as d:  # unix socket paths are short
        sock_path = str(Path(d) / "docker.sock")
        sock = serve_container(boxed, ContainerSpec(warm_start_s=0.3), sock_path)
        daemon = None
        try:
            port = free_port()
            init = _run(sentinel + ["init", "--url", plain.url, "--url", boxed.url,
                                    "--docker-socket", sock_path,
                                    "--listen", f"127.0.0.1:{port}"], folder, env)
            assert init.returncode == 0, init.stdout + init.stderr
            assert f"{boxed.url}: vLLM 0.11.0" in init.stdout and "container vllm" in init.stdout
            cfg = (folder / "sentinel.yaml").read_text()
            assert "docker: [vllm]" in cfg and "restart-vllm-1" in cfg, cfg
            assert "logs: no container found" in cfg  # the plain server: said, not guessed
            check = _run(sentinel + ["check", "config", "sentinel.yaml"], folder, env)
            assert check.returncode == 0, check.stdout + check.stderr
            daemon = subprocess.Popen(sentinel + ["run", "-c", "sentinel.yaml"], cwd=folder,
                                      env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True)
            api = f"http://127.0.0.1:{port}"
            wait_for(lambda: _get(f"{api}/readyz") == 200 or daemon.poll() is not None,
                     DEADLINE_S, "the daemon to be ready")
            assert daemon.poll() is None, daemon.communicate()[1]
            container = boxed.container
            assert container is not None
            # At once: the follower asks for the lines since the daemon began watching,
            # so a crash written before its first request is still read (issue 53).
            container.crash("down")
            wait_for(lambda: _crash_incident(api), DEADLINE_S,
                     "an incident for the crash of vllm-1")
            # The policy init wrote is what decides: it shows on the incident's timeline.
            wait_for(lambda: "restart-vllm-1" in _incident_text(api), DEADLINE_S,
                     "the policy init wrote to decide on the crash")
        finally:
            if daemon is not None and daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                daemon.wait(60)
            sock.stop()
            plain.stop()
            boxed.stop()


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)


def _get(url: str) -> int:
    try:
        return httpx.get(url, timeout=5).status_code
    except httpx.HTTPError:
        return 0


def _crash_incident(api: str) -> bool:
    try:
        text = httpx.get(f"{api}/api/v1/incidents", timeout=5).text
    except httpx.HTTPError:
        return False
    return "VLLMHBMOutOfMemory" in text and "vllm-1" in text


def _incident_text(api: str) -> str:
    """The newest incident's detail (timeline included), as text."""
    try:
        listed = httpx.get(f"{api}/api/v1/incidents", timeout=5).json()
        rows = listed.get("incidents", listed) if isinstance(listed, dict) else listed
        newest = max(int(r["id"]) for r in rows)
        return httpx.get(f"{api}/api/v1/incidents/{newest}", timeout=5).text
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return ""


def environ(**extra: str) -> dict[str, str]:
    """os.environ without anything that points a command at a checkout, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SENTINEL_HOME", "SENTINEL_MIGRATIONS_DIR", "PYTHONPATH")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}
