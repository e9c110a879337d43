"""TPU node state as series, from the Cloud TPU v2 API (google-cloud-tpu, REST transport).

Each poll reads the node (and its queued resource, where configured) and
returns samples in the style of kube-state-metrics: one series per known
state, 1 for the current one and 0 for the rest, so a rule can say
`sentinel_tpu_node_state{state="PREEMPTED"} == 1` and a state change is a
value change, not a series appearing from nothing:

    sentinel_tpu_node_state{target, node, state}              1 | 0
    sentinel_tpu_node_health{target, node, health}            1 | 0
    sentinel_tpu_node_exists{target, node}                    1 | 0
    sentinel_tpu_queued_resource_state{target, queued_resource, state}  1 | 0
    sentinel_tpu_up{target, node}                             1 | 0

A node the API answers 404 for is an answer, not an outage: a Spot node is
deleted when it is preempted inside a queued resource, and "the node is gone"
must page as that (`sentinel_tpu_node_exists 0`), not after 5 minutes as "the
API is unreachable". The queued resource is still read then: its state says
whether the node is gone for good (SUSPENDED, FAILED) or not there yet
(WAITING_FOR_RESOURCES, PROVISIONING).

The known states are the library's enums (`Node.State`, `Node.Health`,
`QueuedResourceState.State`, the "unspecified" value only when it is the
current one), so a newer library brings new states along. `sentinel_tpu_up`
is 0 when a call failed (no answer, or an error); then only the samples of
the calls that answered come with it, and the others go stale rather than
report a guess. 429
and 5xx back off with jitter (`gcp.Backoff`) and polls in between make no
request. Credentials: Application Default Credentials in production; tests
pass `AnonymousCredentials` and the fake's endpoint.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import replace
from enum import IntEnum
from typing import Any

from sentinel.backoff import Backoff
from sentinel.collect.gcp import DEFAULT_BASE_MS, DEFAULT_MAX_MS, classify_error
from sentinel.collect.logsource import SourceHealth
from sentinel.model import Labels, labels_of

log = logging.getLogger(__name__)

Sample = tuple[Labels, float]


def make_tpu_client(*, api_endpoint: str | None = None, credentials: Any = None) -> Any:
    """A `google.cloud.tpu_v2.TpuClient` on the REST transport (ADC when `credentials` is None).

    `api_endpoint` may carry a scheme (`http://127.0.0.1:PORT` in tests): the
    REST transport keeps a given scheme and adds https:// otherwise.
    """
    from google.cloud import tpu_v2  # imported late: the import is slow

    options = {"api_endpoint": api_endpoint} if api_endpoint else None
    return tpu_v2.TpuClient(credentials=credentials, transport="rest", client_options=options)


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _enum_name(value: Any) -> str:
    # proto-plus gives an IntEnum member; a value newer than the library is a bare int.
    return value.name if isinstance(value, IntEnum) else str(int(value))


def one_hot(metric: str, base: dict[str, str], label: str, current: str,
            known: Iterable[str], unspecified: str) -> list[Sample]:
    """One sample per known value (and the current one): 1 for `current`, 0 for the rest."""
    names = [n for n in known if n != unspecified]
    if current not in names:
        names.append(current)
    return [(labels_of({"__name__": metric, **base, label: n}), 1.0 if n == current else 0.0)
            for n in names]


class TpuNodeSource:
    """Poll one TPU node (and optionally its queued resource) into samples."""

    def __init__(self, target: str, node_name: str, *, queued_resource: str | None = None,
                 client_factory: Callable[[], Any] | None = None, timeout_s: float = 10.0,
                 rng: random.Random | None = None, backoff_base_ms: int = DEFAULT_BASE_MS,
                 backoff_max_ms: int = DEFAULT_MAX_MS) -> None:
        self.target = target
        self.node_name = node_name  # projects/P/locations/ZONE/nodes/NODE
        self.queued_resource = queued_resource  # projects/P/locations/ZONE/queuedResources/Q
        self.name = f"tpu:{node_name}"
        self.health = SourceHealth()
        self.requests_made = 0
        self._factory = client_factory or make_tpu_client
        self._client: Any = None
        self._timeout_s = timeout_s
        self._backoff = Backoff(backoff_base_ms, backoff_max_ms, rng)

    def poll(self, now_ms: int) -> list[Sample]:
        """The node's state, health and queued-resource samples, plus `sentinel_tpu_up`."""
        if not self._backoff.ready(now_ms):
            return [self._up(False)]
        samples: list[Sample] = []
        try:
            client = self._client = self._client or self._factory()
            samples += self._node_or_missing(client)
            if self.queued_resource:
                samples += self._queued_samples(client, self.queued_resource)
        except Exception as exc:  # recorded in health and as up 0, never raised
            self._failed(now_ms, exc)
            return [*samples, self._up(False)]
        self._backoff.succeeded()
        self.health = replace(self.health, ok=True, last_success_ms=now_ms)
        return [*samples, self._up(True)]

    def close(self) -> None:
        """Close the client's transport."""
        client, self._client = self._client, None
        if client is not None:
            try:
                client.transport.close()
            except Exception as exc:  # closing is best effort
                log.debug("%s: close failed: %s", self.name, exc)

    def _node_or_missing(self, client: Any) -> list[Sample]:
        from google.api_core.exceptions import NotFound

        try:
            return [self._exists(True), *self._node_samples(client)]
        except NotFound:
            return [self._exists(False)]

    def _node_samples(self, client: Any) -> list[Sample]:
        from google.cloud.tpu_v2 import Node

        self.requests_made += 1
        node = client.get_node(name=self.node_name, timeout=self._timeout_s)
        base = {"target": self.target, "node": _short(self.node_name)}
        return [
            *one_hot("sentinel_tpu_node_state", base, "state", _enum_name(node.state),
                     Node.State.__members__, "STATE_UNSPECIFIED"),
            *one_hot("sentinel_tpu_node_health", base, "health", _enum_name(node.health),
                     Node.Health.__members__, "HEALTH_UNSPECIFIED"),
        ]

    def _queued_samples(self, client: Any, name: str) -> list[Sample]:
        from google.cloud.tpu_v2 import QueuedResourceState

        self.requests_made += 1
        queued = client.get_queued_resource(name=name, timeout=self._timeout_s)
        base = {"target": self.target, "queued_resource": _short(name)}
        return one_hot("sentinel_tpu_queued_resource_state", base, "state",
                       _enum_name(queued.state.state), QueuedResourceState.State.__members__,
                       "STATE_UNSPECIFIED")

    def _exists(self, exists: bool) -> Sample:
        labels = {"__name__": "sentinel_tpu_node_exists", "target": self.target,
                  "node": _short(self.node_name)}
        return labels_of(labels), 1.0 if exists else 0.0

    def _up(self, up: bool) -> Sample:
        labels = {"__name__": "sentinel_tpu_up", "target": self.target,
                  "node": _short(self.node_name)}
        return labels_of(labels), 1.0 if up else 0.0

    def _failed(self, now_ms: int, exc: BaseException) -> None:
        kind = classify_error(exc)
        delay = self._backoff.failed(now_ms, kind)
        if self.health.ok or self.health.last_error != kind.detail:
            log.warning("%s (target %s): %s; next try in %.1f s",
                        self.name, self.target, kind.detail, delay / 1000)
        self.health = replace(self.health, ok=False, last_error=kind.detail)
