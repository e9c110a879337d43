"""tpu_node_restart: the real google-cloud-tpu client (REST) stops and starts a node on the fake."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakes.offline import connections, is_loopback, offline_google_env
from fakes.tpu_server import FakeTpu, running_fake_tpu

from sentinel.config.remediation import TpuNodeRestartConfig
from sentinel.config.sources import TpuConfig
from sentinel.respond.remediate.actions import ACTIONS
from sentinel.respond.remediate.base import ActionContext, TargetInfo
from sentinel.respond.remediate.guards import Reason

pytestmark = pytest.mark.integration

NODE = "projects/test-project/locations/us-east5-b/nodes/vllm-1"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTpu]:
    offline_google_env(monkeypatch)
    with connections() as hosts, running_fake_tpu() as server:
        yield server
    assert [h for h in hosts if not is_loopback(h)] == []


def ctx(fake: FakeTpu, allow_cold: bool = True, node: str = "vllm-1") -> ActionContext:
    tpu = TpuConfig.model_validate({"project": "test-project", "zone": "us-east5-b",
                                    "node": node, "api_endpoint": fake.endpoint,
                                    "credentials": "anonymous"})
    return ActionContext(TargetInfo("tpu-a", "http://127.0.0.1:1", None, tpu), {},
                         TpuNodeRestartConfig.model_validate({}), 30.0, allow_cold)


def test_stop_then_start_through_long_running_operations(fake: FakeTpu) -> None:
    fake.set_node(NODE, "READY", "HEALTHY")
    fake.op_polls = 3
    outcome = ACTIONS["tpu_node_restart"].run(ctx(fake))
    assert outcome.ok, outcome.detail
    assert fake.actions == [("stop", NODE), ("start", NODE)]  # never delete
    assert outcome.data["state_after_stop"] == "STOPPED"
    assert outcome.data["state_after_start"] == "READY"
    assert fake.nodes[NODE].state == "READY"
    # The client polled the operations until they were done.
    assert sum("/operations/" in path for path, _ in fake.requests) >= 2 * 2


def test_refused_without_allow_cold_and_nothing_asked(fake: FakeTpu) -> None:
    fake.set_node(NODE, "READY", "HEALTHY")
    check = ACTIONS["tpu_node_restart"].check(ctx(fake, allow_cold=False))
    assert (check.ok, check.reason) == (False, Reason.COLD_CACHE)
    outcome = ACTIONS["tpu_node_restart"].run(ctx(fake, allow_cold=False))
    assert not outcome.ok and fake.actions == []


def test_unknown_node_is_a_failed_outcome_not_an_exception(fake: FakeTpu) -> None:
    outcome = ACTIONS["tpu_node_restart"].run(ctx(fake, node="gone"))
    assert not outcome.ok
    assert "NotFound" in outcome.detail and "was not found" in outcome.detail
    assert fake.actions == [("stop", NODE.replace("vllm-1", "gone"))]
