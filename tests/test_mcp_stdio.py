"""MCP over stdio: the test speaks JSON-RPC to `sentinel mcp` (initialize, tools/list,
tools/call for every tool) and gets the same data as the HTTP API of the running daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_helpers import WRITE_TOKEN, Rig, start_rig, wait_log_source
from fixtures_e2e import wait_for

from sentinel.api.mcp_server import TOOLS

pytestmark = pytest.mark.integration


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:
        yield Path(d)


class Stdio:
    """A JSON-RPC peer over a child's stdin/stdout, one message per line."""

    def __init__(self, url: str, token: str) -> None:
        env = {**os.environ, "SENTINEL_TOKEN": token}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sentinel", "mcp", "--url", url], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        self.next_id = 0

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        self._send({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                    "params": params or {}})
        while True:
            line = self.proc.stdout.readline()  # type: ignore[union-attr]
            assert line, self.proc.stderr.read()  # type: ignore[union-attr]
            msg = json.loads(line)
            if msg.get("id") == self.next_id:
                assert "error" not in msg, msg
                return msg["result"]

    def notify(self, method: str) -> None:
        self._send({"jsonrpc": "2.0", "method": method})

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        assert not result.get("isError"), result
        structured = result["structuredContent"]
        # The text content carries the same JSON.
        assert json.loads(result["content"][0]["text"]) == structured
        return structured

    def _send(self, msg: dict[str, Any]) -> None:
        self.proc.stdin.write(json.dumps(msg) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(10)


def test_every_tool_over_stdio_matches_the_api(tmp_path, sock_dir, sink) -> None:  # noqa: ANN001
    rig: Rig = start_rig(tmp_path, sock_dir, sink.url, approval="required")
    peer = Stdio(rig.url, WRITE_TOKEN)
    try:
        wait_log_source(rig)
        rig.crash()
        wait_for(lambda: httpx.get(f"{rig.url}/api/v1/approvals?status=pending")
                 .json()["approvals"], 15, "a parked action")
        api = httpx.Client(base_url=rig.url)
        init = peer.request("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "sentinel-test", "version": "1"}})
        assert init["serverInfo"]["name"] == "sentinel" and "tools" in init["capabilities"]
        peer.notify("notifications/initialized")
        tools = peer.request("tools/list")["tools"]
        assert sorted(t["name"] for t in tools) == sorted(TOOLS)
        assert all(t.get("outputSchema") for t in tools)

        assert peer.call("list_incidents", limit=20) == api.get(
            "/api/v1/incidents", params={"limit": 20}).json()
        assert peer.call("list_incidents", category="hbm_oom", status="open") == api.get(
            "/api/v1/incidents", params={"category": "hbm_oom", "status": "open"}).json()
        (inc,) = api.get("/api/v1/incidents").json()["incidents"]
        got = peer.call("get_incident", incident_id=inc["id"])
        want = api.get(f"/api/v1/incidents/{inc['id']}").json()
        assert got.pop("truncated") is False and got == want
        stats = peer.call("incident_stats", since="1h", by="target")
        want = api.get("/api/v1/stats", params={"since": "1h", "by": "target"}).json()
        assert stats["groups"] == want["groups"] and stats["total"] == want["total"]
        assert peer.call("target_health")["targets"][0]["name"] == "tpu-a"
        assert peer.call("target_health")["targets"][0]["open_incidents"] == 1
        q = peer.call("query", query='sentinel_log_signature_matches_total{target="tpu-a"}')
        assert q["status"] == "success"
        assert q["data"]["result"][0]["metric"] == api.get("/api/v1/query", params={
            "query": 'sentinel_log_signature_matches_total{target="tpu-a"}'}).json()[
            "data"]["result"][0]["metric"]
        created = peer.call("create_silence", matchers=['alertname="Nope"'], comment="mcp test",
                            duration="1h")
        listed = peer.call("list_silences")
        assert listed["silences"] == api.get("/api/v2/silences").json()
        assert listed["silences"][0]["id"] == created["silenceID"]
        assert "oncall-lead" in listed["silences"][0]["createdBy"]
        approvals = peer.call("list_approvals", status="pending")
        assert approvals == api.get("/api/v1/approvals?status=pending").json()
        aid = approvals["approvals"][0]["id"]
        assert peer.call("approve_action", approval_id=aid)["changed"] is True
        denied = peer.call("deny_action", approval_id=aid)
        assert denied["changed"] is False  # already approved: a later deny does nothing
        assert peer.call("acknowledge_incident", incident_id=inc["id"])["changed"] is True
        assert peer.call("add_incident_note", incident_id=inc["id"], text="from mcp")["changed"]
        timeline = api.get(f"/api/v1/incidents/{inc['id']}").json()["timeline"]
        assert {"acknowledged", "note"} <= {t["kind"] for t in timeline}
        assert any(t["message"] == "oncall-lead: from mcp" for t in timeline)
        wait_for(lambda: [a for a in api.get(f"/api/v1/incidents/{inc['id']}").json()["actions"]
                          if a["status"] == "succeeded"], 20, "the approved action to run")
        # Bounded: even a large limit comes back capped.
        assert len(peer.call("list_incidents", limit=10_000)["incidents"]) <= 100
    finally:
        peer.close()
        rig.stop()
