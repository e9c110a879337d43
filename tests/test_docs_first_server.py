"""docs/tutorials/first-server.md, followed literally: its commands and config, run in order.

Every fenced block after a `<!-- test: KIND -->` marker is taken from the page
as written and run: `background` blocks are started and left running (the
simulator, the throwaway receiver, `sentinel run`), `run` blocks must exit 0,
`file NAME` blocks are saved as NAME, `until TEXT` blocks are repeated until
their output holds TEXT. The only changes are the ports (the page's 8000, 5001
and 9465 become free ones, and the daemon's listen address comes from
SENTINEL_LISTEN, the override the CLI documents), so the test runs beside others.
Success is what the page promises: an incident, then a firing and a resolved
webhook at the receiver.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from fixtures_e2e import wait_for
from fixtures_http import http
from fixtures_ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PAGE = Path(__file__).resolve().parent.parent / "docs" / "tutorials" / "first-server.md"
STEP = re.compile(r"<!-- test: (.+?) -->\n```(\w+)\n(.*?)```", re.S)


def steps() -> list[tuple[str, str]]:
    """(kind, text) of each marked block, in page order."""
    return [(kind.strip(), body) for kind, _lang, body in STEP.findall(PAGE.read_text())]


def test_the_page_has_the_steps_the_test_follows() -> None:
    kinds = [k.split()[0] for k, _ in steps()]
    assert kinds.count("background") == 3
    assert "file" in kinds and "until" in kinds and kinds.count("run") >= 3
    config = next(body for kind, body in steps() if kind == "file sentinel.yaml")
    assert "rule_files" not in config, "the tutorial relies on the bundled rules by default"


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class _Output:
    """Collects a background process's stdout lines as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        stream = proc.stdout
        threading.Thread(target=lambda: self.lines.extend(iter(stream.readline, "")),
                         daemon=True).start()

    def bodies(self) -> list[dict]:
        """Every JSON object printed so far (a body may span lines)."""
        text, out, at = "".join(self.lines), [], 0
        decoder = json.JSONDecoder()
        while (start := text.find("{", at)) != -1:
            try:
                value, at = decoder.raw_decode(text, start)
            except ValueError:
                at = start + 1
                continue
            if isinstance(value, dict):
                out.append(value)
        return out


def test_first_server_tutorial_gets_an_incident_and_a_webhook(tmp_path: Path) -> None:
    ports = {"8000": str(free_port()), "5001": str(free_port())}
    listen = free_port()
    env = {**os.environ, "SENTINEL_LISTEN": f"127.0.0.1:{listen}"}

    def literal(text: str) -> str:
        return re.sub(r"\b(8000|5001)\b", lambda m: ports[m.group(1)], text)

    procs: list[subprocess.Popen[str]] = []
    outputs: list[_Output] = []
    try:
        for kind, body in steps():
            text = literal(body)
            if kind.startswith("file "):
                (tmp_path / kind.split(None, 1)[1]).write_text(text)
            elif kind == "run":
                done = subprocess.run(shlex.split(text), cwd=tmp_path, env=env,
                                      capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, (text, done.stdout, done.stderr)
            elif kind == "background":
                err = tmp_path / f"background-{len(procs)}.stderr"
                with err.open("w") as err_file:
                    proc = subprocess.Popen(shlex.split(text), cwd=tmp_path, env=env,
                                            text=True, stdout=subprocess.PIPE, stderr=err_file)
                procs.append(proc)
                outputs.append(_Output(proc))
                _wait_ready(text, ports, listen, proc, err)
            elif kind.startswith("until "):
                # The page is watched first (reading the receiver's output costs nothing);
                # the incident is on record before its page is sent, so the command then
                # shows it at once. Run in a loop from the start, each try a new CLI
                # process (~0.6 CPU-s), it ran ~45 times through the rule's 30 s `for`.
                firing = wait_for(lambda: _with_status(outputs[1], "firing"), 180,
                                  "the firing page")
                alert = firing[0]["alerts"][0]
                assert alert["labels"]["alertname"] == "VLLMRequestsQueued"
                assert alert["labels"]["target"] == "gpu-0"
                _until(text, kind.split(None, 1)[1], tmp_path, env)
            else:
                raise AssertionError(f"unknown step kind {kind!r}")
        wait_for(lambda: _with_status(outputs[1], "resolved"), 120,
                 "the resolved page after the last step")
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def _until(command: str, expected: str, cwd: Path, env: dict[str, str]) -> None:
    """Run `command` until its output holds `expected`: a try a second, 120 s at most."""
    deadline = time.monotonic() + 120
    while True:
        out = subprocess.run(shlex.split(command), cwd=cwd, env=env, capture_output=True,
                             text=True, timeout=60).stdout
        if expected in out:
            return
        assert time.monotonic() < deadline, f"no {expected} in `{command.strip()}`: {out}"
        time.sleep(1.0)  # the pace of the retries, not a wait for an event


def _with_status(receiver: _Output, status: str) -> list[dict]:
    return [b for b in receiver.bodies() if b.get("status") == status]


def _wait_ready(command: str, ports: dict[str, str], listen: int,
                proc: subprocess.Popen[str], err: Path) -> None:
    """Wait until a background step serves: its port, or the daemon's /readyz. A step
    that exits fails the test at once, with its standard error."""
    def alive() -> None:
        if proc.poll() is not None:
            raise AssertionError(f"`{command.strip()}` exited {proc.returncode}: "
                                 f"{err.read_text(errors='replace')[-2000:]}")

    if command.startswith("sentinel run"):
        wait_for(lambda: alive() or _ready(listen), 180, "sentinel run's /readyz")
        return
    port = next(int(p) for p in ports.values() if p in command)
    wait_for(lambda: alive() or _port_open(port), 120,
             f"port {port} of `{command.splitlines()[0]}`")


def _ready(port: int) -> bool:
    try:
        return http.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
