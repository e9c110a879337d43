"""The routing tree: which receivers an alert goes to, and in which aggregation group.

Alertmanager's semantics: a route matches when all its matchers match; its
children are tried in order, and the first matching child ends the search
unless it has `continue: true`; a route none of whose children matched
handles the alert itself. Children inherit receiver and grouping settings.
`group_by: ["..."]` groups by every label.

With no route configured, every receiver gets every alert, grouped by
target (one group per server: one failure, one message) and sent at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from sentinel.config.notify import (
    DEFAULT_GROUP_INTERVAL_MS,
    DEFAULT_GROUP_WAIT_MS,
    DEFAULT_REPEAT_INTERVAL_MS,
    RouteConfig,
)
from sentinel.model import Labels, format_labels
from sentinel.respond.notify.matchers import Matcher, matches_all, parse_matchers
from sentinel.timeintervals import TimeInterval, any_active

T = TypeVar("T")
ALL_LABELS = "..."
# The default route groups by target (issue 33): one failure of one server raises several
# alerts (its crash signature, down, health failing, latency); grouped by target they are one
# message, and one PagerDuty incident (its dedup_key is the group's key), not one per alert
# name. Alertmanager's own default (group by nothing) would merge the whole fleet instead.
# A fleet incident's alert (incidents/fleet.py) has no target but a `fleet` label of its
# own: grouped by it too, its page is a message of its own, not one shared with
# Sentinel's own alerts (which have neither label).
IMPLICIT_GROUP_BY = ("target", "fleet")


@dataclass(frozen=True, slots=True)
class Route:
    """One node of the routing tree, with every inherited setting resolved."""

    path: str  # "0", "0.1", …: position in the tree, part of each group's key
    receiver: str
    matchers: tuple[Matcher, ...]
    group_by: tuple[str, ...]
    group_wait_ms: int
    group_interval_ms: int
    repeat_interval_ms: int
    continue_: bool
    children: tuple[Route, ...]
    mute_time_intervals: tuple[str, ...] = ()
    active_time_intervals: tuple[str, ...] = ()

    def group_labels(self, labels: Labels) -> Labels:
        """The labels an alert is grouped by on this route."""
        if ALL_LABELS in self.group_by:
            return labels
        return tuple((k, v) for k, v in labels if k in self.group_by)

    def group_key(self, labels: Labels) -> str:
        """The aggregation group's identity: route, receiver and group labels."""
        return f"{self.path}/{self.receiver}:{format_labels(self.group_labels(labels))}"


def build_route(config: RouteConfig | None, receivers: Sequence[str]) -> Route | None:
    """The routing tree from config; the implicit fan-out tree when none; None without receivers."""
    if config is not None:
        return _build(config, None, "0")
    if not receivers:
        return None
    children = tuple(
        Route(f"0.{i}", name, (), IMPLICIT_GROUP_BY, 0, 0, DEFAULT_REPEAT_INTERVAL_MS, True, ())
        for i, name in enumerate(receivers))
    return Route("0", receivers[0], (), IMPLICIT_GROUP_BY, 0, 0, DEFAULT_REPEAT_INTERVAL_MS,
                 False, children)


def _build(cfg: RouteConfig, parent: Route | None, path: str) -> Route:
    receiver = cfg.receiver or (parent.receiver if parent else "")
    node = Route(
        path=path, receiver=receiver, matchers=parse_matchers(cfg.matchers),
        group_by=_pick(cfg.group_by, parent.group_by if parent else ()),
        group_wait_ms=_pick(cfg.group_wait_ms,
                            parent.group_wait_ms if parent else DEFAULT_GROUP_WAIT_MS),
        group_interval_ms=_pick(cfg.group_interval_ms,
                                parent.group_interval_ms if parent else DEFAULT_GROUP_INTERVAL_MS),
        repeat_interval_ms=_pick(cfg.repeat_interval_ms, parent.repeat_interval_ms if parent
                                 else DEFAULT_REPEAT_INTERVAL_MS),
        continue_=cfg.continue_, children=(),
        # Not inherited, as in Alertmanager: each route names its own.
        mute_time_intervals=cfg.mute_time_intervals,
        active_time_intervals=cfg.active_time_intervals,
    )
    children = tuple(_build(c, node, f"{path}.{i}") for i, c in enumerate(cfg.routes))
    return replace(node, children=children)


def match_routes(route: Route, labels: Labels) -> list[Route]:
    """The routes that handle an alert with these labels (empty when the root does not match)."""
    if not matches_all(route.matchers, labels):
        return []
    found: list[Route] = []
    for child in route.children:
        matched = match_routes(child, labels)
        found += matched
        if matched and not child.continue_:
            break
    return found or [route]


def time_muted(route: Route, intervals: Mapping[str, tuple[TimeInterval, ...]],
               now_ms: int) -> str | None:
    """Why the route sends nothing now (a mute interval, or outside its active ones), or None."""
    muting = any_active(route.mute_time_intervals, intervals, now_ms)
    if muting is not None:
        return f"mute time interval {muting}"
    if route.active_time_intervals and \
            any_active(route.active_time_intervals, intervals, now_ms) is None:
        return "outside its active time intervals"
    return None


def _pick(own: T | None, inherited: T) -> T:
    return inherited if own is None else own
