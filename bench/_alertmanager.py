"""Debian's Alertmanager on loopback, paging one webhook: the peer of the benches that
compare Sentinel's notifications with Prometheus + Alertmanager (detection.py,
pagestream.py). Not a bench itself.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

READY_S = 30.0
_LISTENING = re.compile(r'msg="Listening on" address=(\S+)')


def alertmanager_binary() -> str | None:
    """The path of Debian's `prometheus-alertmanager` (or an `alertmanager`), if installed."""
    return shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


class Alertmanager:
    """One Alertmanager in `folder` (created): `route`, whose receiver is a webhook to `hook`.

    It listens on port 0 and `address` is read back from its log, so two benches (or a
    bench and the tests) on one machine never race for a port. Ready when this returns.
    """

    def __init__(self, folder: Path, hook: str, route: dict[str, Any],
                 inhibit_rules: list[dict[str, Any]] | None = None) -> None:
        binary = alertmanager_binary()
        if binary is None:
            raise SystemExit("needs Alertmanager: apt-get install prometheus-alertmanager")
        folder.mkdir()
        config: dict[str, Any] = {
            "route": route,
            "receivers": [{"name": route["receiver"], "webhook_configs": [
                {"url": hook, "send_resolved": True}]}],
        }
        if inhibit_rules:
            config["inhibit_rules"] = inhibit_rules
        (folder / "am.yml").write_text(yaml.safe_dump(config))
        self.log = folder / "am.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={folder / 'am.yml'}",
                 f"--storage.path={folder / 'data'}", "--web.listen-address=127.0.0.1:0",
                 "--cluster.listen-address="], stdout=log, stderr=subprocess.STDOUT)
        self.address = self._ready()

    def _ready(self) -> str:
        """The address it listens on, once /-/ready answers 200."""
        until = time.monotonic() + READY_S
        while time.monotonic() < until:
            if self.proc.poll() is not None:
                raise SystemExit(f"alertmanager exited: {self.log.read_text()[-2000:]}")
            found = _LISTENING.search(self.log.read_text(errors="replace"))
            if found and _answers(f"http://{found[1]}/-/ready"):
                return found[1]
            time.sleep(0.1)  # a poll step: start-up takes about half a second
        raise SystemExit("timed out waiting for alertmanager ready")

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 15 s)."""
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
