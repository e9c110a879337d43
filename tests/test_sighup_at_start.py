"""A SIGHUP in the first seconds of `sentinel run` is queued, never fatal (issue 53).

A real `sentinel run` process (`python -m sentinel` and the console script):
SIGHUP is sent as soon as the process catches it (its /proc status says so: from
`hold_sighup`, at the top of the entry module, before the CLI's imports and the
pre-flight) and then again and again until the daemon is ready. It must come up,
say in its log that the signal was taken, reload once started, and stop cleanly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import wait_for
from fixtures_ports import free_port

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.integration
DEADLINE_S = 120


def _catches_sighup(pid: int) -> bool:
    """Whether the process has a handler for SIGHUP (SigCgt bit 1 in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    line = next(ln for ln in status.splitlines() if ln.startswith("SigCgt:"))
    return bool(int(line.split()[1], 16) & (1 << (signal.SIGHUP - 1)))


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _commands() -> list[list[str]]:
    """`python -m sentinel`, and the console script beside this Python when there is one
    (it imports `sentinel.cli` first: the handler is installed at that module's top)."""
    script = Path(sys.executable).parent / "sentinel"
    return [[sys.executable, "-m", "sentinel"]] + ([[str(script)]] if script.exists() else [])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
@pytest.mark.parametrize("command", _commands(), ids=lambda c: Path(c[-1]).name)
def test_sighups_while_starting_are_queued_and_the_daemon_comes_up(
        tmp_path: Path, command: list[str]) -> None:
    port = free_port()
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"database: sqlite:///{tmp_path / 's.db'}\nlisten: 127.0.0.1:{port}\n")
    log = (tmp_path / "stderr").open("w+")
    proc = subprocess.Popen([*command, "run", "-c", str(cfg)],
                            stdout=subprocess.DEVNULL, stderr=log, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _catches_sighup(proc.pid) or proc.poll() is not None, DEADLINE_S,
                 "the process to catch SIGHUP")
        sent = 0
        while not _ready(url):  # every SIGHUP lands before the daemon is ready
            assert proc.poll() is None, f"died of SIGHUP #{sent}: {Path(log.name).read_text()}"
            proc.send_signal(signal.SIGHUP)
            sent += 1
            time.sleep(0.05)  # paces the signals; the loop ends on readiness, not on time
        assert sent >= 1
        text = lambda: Path(log.name).read_text()  # noqa: E731
        wait_for(lambda: "configuration reloaded" in text(), DEADLINE_S,
                 "the queued reload to run once started")
        assert "SIGHUP received while starting" in text() or "SIGHUP: reloading" in text()
        assert proc.poll() is None
        proc.send_signal(signal.SIGHUP)  # and one after the start: an ordinary reload
        wait_for(lambda: text().count("configuration reloaded") >= 2, DEADLINE_S,
                 "a reload after the start")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        log.close()
    assert code == 0, Path(log.name).read_text()


def test_a_sighup_during_the_preflight_does_not_kill_sentinel(tmp_path: Path) -> None:
    """The pre-flight waits on a database that accepts and never answers; SIGHUP then.

    Before issue 53 the process died of it (SIGHUP's default action). Now the signal
    is queued, and `run` ends as the pre-flight decides: exit 4 naming the database.
    """
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"database: postgresql+psycopg://u:p@127.0.0.1:{port}/s\n"
                   f"listen: 127.0.0.1:{free_port()}\n")
    proc = subprocess.Popen([sys.executable, "-m", "sentinel", "run", "-c", str(cfg)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        conn, _ = silent.accept()  # the pre-flight's connection: start-up is under way
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=DEADLINE_S)
        conn.close()
    finally:
        silent.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 4, (proc.returncode, err)  # not -SIGHUP
    assert "database" in err and "cannot connect" in err


def test_the_console_scripts_module_holds_sighup_before_its_other_imports() -> None:
    """The console script runs `from sentinel.cli import console`: importing that module
    for `run` installs the handler before argparse and the command modules load."""
    code = ("import sys, signal\n"
            "sys.argv = ['sentinel', 'run']\n"
            "seen = []\n"
            "real = signal.signal\n"
            "def spy(sig, handler):\n"
            "    mods = sys.modules\n"
            "    seen.append((int(sig), 'argparse' in mods, 'sentinel.cli.run' in mods))\n"
            "    return real(sig, handler)\n"
            "signal.signal = spy\n"
            "import sentinel.cli\n"
            "print(seen)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=DEADLINE_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"[({int(signal.SIGHUP)}, False, False)]"
