"""The real Alertmanager (Debian's `prometheus-alertmanager`) on loopback.

Skipped without the binary, unless CI=true, where that is a failure. It routes
everything at once to a webhook sink, so what Alertmanager decides (firing,
resolved) is seen there as well as in its API. A restart keeps the port it first
bound (a receiver's URL names it) and its storage folder; Alertmanager keeps
alerts in memory only, so a restarted one holds only what is posted again.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from fixtures_http import http
from fixtures_prometheus import start_listening


def alertmanager_binary() -> str:
    """The path of Alertmanager, or skip (fail under CI=true)."""
    path = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("prometheus-alertmanager is required under CI=true")
        pytest.skip("prometheus-alertmanager not installed")
    return path


class RealAlertmanager:
    """One Alertmanager process, routing every alert at once to `hook_url`."""

    def __init__(self, folder: Path, resolve_timeout: str, hook_url: str) -> None:
        self.folder = folder
        (folder / "am.yml").write_text(
            f"global: {{resolve_timeout: {resolve_timeout}}}\n"
            "route: {receiver: hook, group_by: [alertname], group_wait: 0s, "
            "group_interval: 1s, repeat_interval: 1h}\n"
            f"receivers: [{{name: hook, webhook_configs: [{{url: '{hook_url}', "
            "send_resolved: true}]}]\n")
        self.port = 0  # the first start binds port 0; a restart keeps what it bound
        self.url = ""
        self.start()

    def start(self) -> None:
        """Start the process (again), on the port of the first start."""
        self.proc, self.url = start_listening(
            [alertmanager_binary(), f"--config.file={self.folder / 'am.yml'}",
             f"--storage.path={self.folder / 'am-data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address="],
            self.folder / "alertmanager.log")
        self.port = int(self.url.rsplit(":", 1)[1])

    def alerts(self, name: str) -> list[dict]:
        """The alerts named `name` Alertmanager holds as not resolved (its API leaves
        resolved ones out)."""
        resp = http.get(f"{self.url}/api/v2/alerts", timeout=5)
        resp.raise_for_status()
        return [a for a in resp.json() if a["labels"].get("alertname") == name]

    def stop(self) -> None:
        """Stop the process (a restart may follow)."""
        self.proc.terminate()
        self.proc.wait(10)
