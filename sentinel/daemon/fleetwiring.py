"""Builds the fleet correlator (incidents/fleet_hook.py) from the configuration."""

from __future__ import annotations

from sentinel.config import Config
from sentinel.incidents.fleet import FleetPolicy
from sentinel.incidents.fleet_hook import FleetCorrelator, UpdateWriter
from sentinel.respond.notify.routing import build_route


def fleet_correlator(cfg: Config, updates: UpdateWriter | None) -> FleetCorrelator | None:
    """The correlator for `cfg.fleet`, or None when it is turned off.

    Group sizes and the page's breakdown come from the configured targets' labels
    (targets found in Kubernetes are counted by the minimum, not a fraction).
    """
    f = cfg.fleet
    if not f.enabled:
        return None
    policy = FleetPolicy(enabled=True, min_targets=f.min_targets, min_fraction=f.min_fraction,
                         window_ms=f.window_ms, group_by=f.group_by, list_limit=f.list_limit)
    return FleetCorrelator(policy, target_labels={t.name: dict(t.labels) for t in cfg.targets},
                           route=build_route(cfg.notify.route, [r.name for r in cfg.receivers]),
                           updates=updates, breakdown_by=f.breakdown_by)
