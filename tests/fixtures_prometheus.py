"""The real `prometheus` (Debian's package) on loopback, for the remote query backend tests.

Skipped without the binary, unless CI=true, where that is a failure (as the
PostgreSQL and promtool tests do).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest


def prometheus_binary() -> str:
    """The path of `prometheus`, or skip (fail under CI=true)."""
    path = shutil.which("prometheus")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("prometheus is required in CI (Debian package prometheus)")
        pytest.skip("prometheus not installed (apt-get install prometheus)")
    return path


def start_listening(argv: list[str], log: Path, timeout_s: float = 60
                    ) -> tuple[subprocess.Popen[bytes], str]:
    """Start a Prometheus-family binary (prometheus, alertmanager) whose `argv` says
    `--web.listen-address=127.0.0.1:0`, and read the port it bound back from its
    `msg="Listening on" address=...` log line (info level): its URL, once it answers
    /-/ready. A port picked free here and handed over could be taken by another worker's
    process before the binary binds it. Its output goes to `log`, not to a pipe."""
    offset = log.stat().st_size if log.exists() else 0
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited: {log.read_text(errors='replace')[-2000:]}")
        if url is None:
            with log.open("rb") as f:
                f.seek(offset)
                m = re.search(rb'msg="Listening on" address=127\.0\.0\.1:(\d+)', f.read())
            url = f"http://127.0.0.1:{int(m.group(1))}" if m else None
        if url is not None:
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    proc.kill()
    proc.wait(10)
    raise RuntimeError(f"{argv[0]} not ready in {timeout_s:.0f} s: "
                       f"{log.read_text(errors='replace')[-2000:]}")


class Prometheus:
    """One Prometheus process scraping `targets` (name → host:port) every `interval`."""

    def __init__(self, work: Path, targets: dict[str, str], interval: str = "1s",
                 rule_files: tuple[str, ...] = ()) -> None:
        self.binary = prometheus_binary()
        self.work = work
        self.port = 0  # the first start listens on port 0; restarts keep the port it bound
        self.url = ""  # known once started
        statics = "".join(
            f"      - {{targets: ['{addr}'], labels: {{target: '{name}'}}}}\n"
            for name, addr in targets.items())
        rules = ", ".join(f"'{p}'" for p in rule_files)
        (work / "prometheus.yml").write_text(
            f"global: {{scrape_interval: {interval}, scrape_timeout: {interval}, "
            f"evaluation_interval: {interval}}}\n"
            f"rule_files: [{rules}]\n"
            "scrape_configs:\n  - job_name: vllm\n    static_configs:\n" + statics)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = work / "prometheus.log"

    def start(self) -> Prometheus:
        """Start (or restart on the same data dir and port) and wait until it is ready."""
        self.proc, self.url = start_listening(
            [self.binary, f"--config.file={self.work / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.work / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=info"], self.log)
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def pause(self) -> None:
        """SIGSTOP: the socket still accepts connections, nothing answers (a hung backend)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after pause()."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Terminate this process (resumed first if paused) and wait for it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
