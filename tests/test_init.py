"""`sentinel init` (issue 53): a first config from what the servers say, then the pre-flight.

The end-to-end case (empty folder → init → check config → run catches a crash) runs
here with this checkout, and in tests/test_packaging.py with a built wheel.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from init_scenario import environ, init_then_catch_a_crash

from sentinel import exitcodes
from sentinel.firstrun.look import Container, ServerLook
from sentinel.firstrun.render import InitOptions, render

ROOT = Path(__file__).resolve().parent.parent
SENTINEL = [sys.executable, "-m", "sentinel"]


def _env() -> dict[str, str]:
    return environ(PYTHONPATH=str(ROOT))


@pytest.mark.integration
def test_from_an_empty_folder_init_writes_a_config_that_catches_a_crash(tmp_path):
    init_then_catch_a_crash(SENTINEL, tmp_path, _env())


def _look(url: str, image: str = "", legacy: bool = False) -> ServerLook:
    metrics = {"vllm:num_requests_running", "vllm:time_per_output_token_seconds_bucket",
               "vllm:gpu_cache_usage_perc" if legacy else "vllm:kv_cache_usage_perc"}
    container = Container("vllm-a", image, "/var/run/docker.sock") if image else None
    return ServerLook(url, "0.10.1", "m", frozenset(metrics), container)


def test_the_policy_fits_what_was_found():
    text = render([_look("http://a:8000", "vllm/vllm-openai:v0.10.1"),
                   _look("http://b:8000", legacy=True)], InitOptions(), "2026-12-07")
    # The containerised GPU server: logs from the container, a restart, a GPU's deadline.
    assert "docker: [vllm-a]" in text and "restart-vllm-0" in text
    assert "verify_deadline: 10m   # cuda" in text
    assert "docker_socket" not in text  # the default socket is not written out
    # The other: said, with what to add, and nothing acted on.
    assert "restart-vllm-1" not in text and "logs: no container found" in text
    assert "pre-0.9 metric names" in text
    assert "accelerator cuda" in text and "accelerator unknown" in text
    assert "# No receiver yet" in text  # and so nothing pages: said in the file
    tpu = render([_look("http://t:8000", "vllm/vllm-tpu:nightly")], InitOptions(), "x")
    assert "verify_deadline: 30m   # tpu" in tpu


def test_a_paging_webhook_pages_only_critical_alerts(tmp_path):
    text = render([_look("http://127.0.0.1:9")], InitOptions("127.0.0.1:0", "HOOK"), "x")
    assert "url: ${HOOK}" in text and "matchers: ['severity=\"critical\"']" in text
    cfg = tmp_path / "s.yaml"
    cfg.write_text(text)
    out = subprocess.run(SENTINEL + ["check", "config", "--offline", str(cfg)],
                         capture_output=True, text=True, timeout=90,
                         env={**_env(), "HOOK": "http://127.0.0.1:9/hook"})
    assert out.returncode == exitcodes.OK, out.stderr


def test_without_urls_and_no_terminal_init_says_what_to_give(tmp_path):
    out = subprocess.run(SENTINEL + ["init"], capture_output=True, text=True, timeout=90,
                         env=_env(), cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert out.returncode == exitcodes.USAGE
    assert "give --url URL" in out.stderr
    assert not list(tmp_path.iterdir())


def test_init_never_overwrites_a_config(tmp_path):
    (tmp_path / "sentinel.yaml").write_text("# mine\n")
    out = subprocess.run(SENTINEL + ["init", "--url", "http://127.0.0.1:9"], capture_output=True,
                         text=True, timeout=90, env=_env(), cwd=tmp_path)
    assert out.returncode == exitcodes.USAGE and "--force" in out.stderr
    assert (tmp_path / "sentinel.yaml").read_text() == "# mine\n"


def test_examples_are_copied_out_of_the_package(tmp_path):
    out = subprocess.run(SENTINEL + ["init", "--examples", str(tmp_path / "deploy")],
                         capture_output=True, text=True, timeout=90, env=_env())
    assert out.returncode == 0, out.stderr
    for name in ("examples/minimal.yaml", "sentinel.service", "grafana/sentinel.json"):
        assert (tmp_path / "deploy" / name).is_file(), out.stdout
    # The unit names this installation's sentinel: a venv is not on systemd's path.
    unit = (tmp_path / "deploy" / "sentinel.service").read_text()
    start = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    exe = start.removeprefix("ExecStart=").split()[0]
    assert Path(exe).is_absolute() and Path(exe).is_file(), start
    again = subprocess.run(SENTINEL + ["init", "--examples", str(tmp_path / "deploy")],
                           capture_output=True, text=True, timeout=90, env=_env())
    assert "kept " in again.stdout
    assert not [ln for ln in again.stdout.splitlines() if ln.startswith("copied ")]


def test_at_a_terminal_init_asks_for_the_urls(tmp_path):
    """No --url at a terminal: one question a server, an empty answer ends the list."""
    import os
    import pty
    import select

    from sentinel.sim.server import start_sim

    sim = start_sim(auto_traffic=False)
    pid, fd = pty.fork()
    if pid == 0:  # the child: `sentinel init` with the pty as its terminal
        os.chdir(tmp_path)
        os.execve(sys.executable, [*SENTINEL, "init", "--listen", "127.0.0.1:0"], _env())
    try:
        said = b""

        def read_until(marker: bytes) -> None:
            nonlocal said
            while marker not in said:
                ready, _, _ = select.select([fd], [], [], 120)
                assert ready, said.decode(errors="replace")
                said += os.read(fd, 4096)

        read_until(b"vLLM server URL 1")
        os.write(fd, sim.url.removeprefix("http://").encode() + b"\n")  # scheme optional
        read_until(b"vLLM server URL 2")
        os.write(fd, b"\n")
        while True:  # drain to the end: a full terminal buffer would block the child
            ready, _, _ = select.select([fd], [], [], 120)
            assert ready, said.decode(errors="replace")
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            said += chunk
        assert b"wrote sentinel.yaml" in said
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
        sim.stop()
    assert os.waitstatus_to_exitcode(status) == 0, said.decode(errors="replace")
    assert f"url: {sim.url}" in (tmp_path / "sentinel.yaml").read_text()
