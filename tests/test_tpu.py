"""TPU node state: the real google-cloud-tpu v2 client (REST) against the local fake."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from fakes.offline import connections, is_loopback, offline_google_env
from fakes.tpu_server import FakeTpu, running_fake_tpu
from google.auth.credentials import AnonymousCredentials

from sentinel.collect.tpu import TpuNodeSource, make_tpu_client
from sentinel.model import label_value

NOW_MS = 1_795_000_000_000
NODE = "projects/test-project/locations/us-east5-b/nodes/vllm-1"
QR = "projects/test-project/locations/us-east5-b/queuedResources/vllm-qr"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTpu]:
    offline_google_env(monkeypatch)
    with connections() as hosts, running_fake_tpu() as server:
        yield server
    assert hosts and [h for h in hosts if not is_loopback(h)] == []


def source(fake: FakeTpu, queued: str | None = None) -> TpuNodeSource:
    return TpuNodeSource(
        "tpu-a", NODE, queued_resource=queued, rng=random.Random(3),
        client_factory=lambda: make_tpu_client(api_endpoint=fake.endpoint,
                                               credentials=AnonymousCredentials()))


def values(samples: list, metric: str, label: str) -> dict[str, float]:
    return {label_value(ls, label): v for ls, v in samples
            if label_value(ls, "__name__") == metric}


def test_state_health_and_queued_resource_one_hot(fake: FakeTpu) -> None:
    fake.set_node(NODE, "READY", "HEALTHY")
    fake.set_queued_resource(QR, "ACTIVE")
    src = source(fake, QR)
    samples = src.poll(NOW_MS)
    states = values(samples, "sentinel_tpu_node_state", "state")
    assert states["READY"] == 1 and sum(states.values()) == 1
    assert {"PREEMPTED", "REPAIRING", "TERMINATED", "CREATING", "STOPPED"} <= set(states)
    assert "STATE_UNSPECIFIED" not in states
    health = values(samples, "sentinel_tpu_node_health", "health")
    assert health == {"HEALTHY": 1, "TIMEOUT": 0, "UNHEALTHY_TENSORFLOW": 0,
                      "UNHEALTHY_MAINTENANCE": 0}
    qr = values(samples, "sentinel_tpu_queued_resource_state", "state")
    assert qr["ACTIVE"] == 1 and qr["WAITING_FOR_RESOURCES"] == 0 and sum(qr.values()) == 1
    assert values(samples, "sentinel_tpu_up", "node") == {"vllm-1": 1}
    labels = dict(samples[0][0])
    assert labels["target"] == "tpu-a" and labels["node"] == "vllm-1"
    # The REST transport asked for numeric enums, which the fake honoured.
    assert all("enum-encoding%3Dint" in path for path, _ in fake.requests)


@pytest.mark.parametrize(("state", "health"), [
    ("PREEMPTED", None), ("REPAIRING", "UNHEALTHY_MAINTENANCE"),
    ("READY", "UNHEALTHY_TENSORFLOW"), ("TERMINATED", "TIMEOUT"),
])
def test_bad_states_are_reported(fake: FakeTpu, state: str, health: str | None) -> None:
    fake.set_node(NODE, state, health, "Maintenance event")
    samples = source(fake).poll(NOW_MS)
    assert values(samples, "sentinel_tpu_node_state", "state")[state] == 1
    got_health = values(samples, "sentinel_tpu_node_health", "health")
    current = health or "HEALTH_UNSPECIFIED"  # no health reported is a state of its own
    assert got_health[current] == 1 and sum(got_health.values()) == 1


def test_state_change_flips_the_one_hot(fake: FakeTpu) -> None:
    fake.set_node(NODE, "READY", "HEALTHY")
    src = source(fake)
    src.poll(NOW_MS)
    fake.set_node(NODE, "PREEMPTED")
    states = values(src.poll(NOW_MS + 30_000), "sentinel_tpu_node_state", "state")
    assert states["PREEMPTED"] == 1 and states["READY"] == 0


def test_api_errors_back_off_and_report_down(fake: FakeTpu) -> None:
    fake.set_node(NODE, "READY", "HEALTHY")
    fake.fail_next(2, 503)
    src = source(fake)
    t, seen = NOW_MS, [0.0]
    while seen[-1] == 0.0 and t < NOW_MS + 60_000:
        seen.append(values(src.poll(t), "sentinel_tpu_up", "node")["vllm-1"])
        t += 100  # a scheduler gone wrong: polling every 100 ms
    assert [s for _, s in fake.requests] == [503, 503, 200]  # ~50 polls, three requests
    assert t - NOW_MS >= 1_000 + 2_000 and seen[-1] == 1.0
    assert src.health.ok


def test_a_missing_node_is_an_answer_not_an_outage(fake: FakeTpu) -> None:
    """404 for the node: it exists 0 (a deleted Spot node pages as such), the API is up."""
    src = source(fake)
    samples = src.poll(NOW_MS)
    assert values(samples, "sentinel_tpu_node_exists", "node") == {"vllm-1": 0}
    assert values(samples, "sentinel_tpu_up", "node") == {"vllm-1": 1}
    assert values(samples, "sentinel_tpu_node_state", "state") == {}
    assert src.health.ok
    fake.set_node(NODE, "READY", "HEALTHY")
    again = src.poll(NOW_MS + 30_000)
    assert values(again, "sentinel_tpu_node_exists", "node") == {"vllm-1": 1}
    assert values(again, "sentinel_tpu_node_state", "state")["READY"] == 1
    src.close()


def test_a_node_deleted_by_preemption_still_reports_its_queued_resource(fake: FakeTpu) -> None:
    fake.set_queued_resource(QR, "SUSPENDED")
    samples = source(fake, QR).poll(NOW_MS)
    assert values(samples, "sentinel_tpu_node_exists", "node") == {"vllm-1": 0}
    qr = values(samples, "sentinel_tpu_queued_resource_state", "state")
    assert qr["SUSPENDED"] == 1 and sum(qr.values()) == 1


def test_an_api_error_is_down_with_the_api_message(fake: FakeTpu) -> None:
    fake.set_node(NODE, "READY", "HEALTHY")
    fake.fail_next(1, 403)
    src = source(fake)
    samples = src.poll(NOW_MS)
    assert samples == [(samples[0][0], 0.0)]
    assert src.health.last_error is not None and "403" in src.health.last_error
    src.close()
