"""Builds the fleet correlator (incidents/fleet_hook.py) from the configuration, and keeps
it current: the targets it counts follow discovery, and `fleet:` follows a reload."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace

from sentinel.config import Config, TargetConfig
from sentinel.incidents.fleet import FleetPolicy
from sentinel.incidents.fleet_hook import FleetCorrelator, UpdateWriter
from sentinel.respond.notify.routing import Route, build_route

log = logging.getLogger(__name__)


def fleet_policy(cfg: Config) -> FleetPolicy:
    """The decisions' policy for `cfg.fleet`."""
    f = cfg.fleet
    return FleetPolicy(enabled=f.enabled, min_targets=f.min_targets, min_fraction=f.min_fraction,
                       window_ms=f.window_ms, group_by=f.group_by, list_limit=f.list_limit)


def _route(cfg: Config) -> Route | None:
    return build_route(cfg.notify.route, [r.name for r in cfg.receivers])


def fleet_correlator(cfg: Config, updates: UpdateWriter | None,
                     discovered: Iterable[TargetConfig] = ()) -> FleetCorrelator | None:
    """The correlator for `cfg.fleet`, or None when it is turned off.

    Group sizes and the page's breakdown come from the targets' labels: the configured
    ones, plus those discovery found (`discovered`; later ones through `track`).
    """
    if not cfg.fleet.enabled:
        return None
    labels = {t.name: dict(t.labels) for t in (*discovered, *cfg.targets)}
    return FleetCorrelator(fleet_policy(cfg), target_labels=labels, route=_route(cfg),
                           updates=updates, breakdown_by=cfg.fleet.breakdown_by)


def retune(current: FleetCorrelator | None, cfg: Config, updates: UpdateWriter | None,
           discovered: Iterable[TargetConfig]) -> FleetCorrelator | None:
    """The correlator after a reload: the running one reconfigured (its open fleet
    incidents kept; turned off, they run to their end and no new one opens), or a new
    one when `fleet:` was turned on.

    `group_by` keys the open fleet incidents: a reload refuses to change it while
    `fleet:` is on (reload.restart_needed). Turned off by an earlier reload, a new
    grouping starts with a new correlator once its open incidents ended; until then the
    old grouping stays (said in the log) so that none is left open forever.
    """
    policy = fleet_policy(cfg)
    if current is not None and policy.group_by != current.policy.group_by:
        if current.any_open():
            log.warning("fleet.group_by %s applies once the open fleet incidents grouped by "
                        "%s ended (restart to apply it now)", list(policy.group_by),
                        list(current.policy.group_by))
            policy = replace(policy, group_by=current.policy.group_by)
        else:
            current = None
    if current is None:
        return fleet_correlator(cfg, updates, discovered)
    current.reconfigure(policy, _route(cfg), cfg.fleet.breakdown_by)
    return current


def track(current: FleetCorrelator | None, added: TargetConfig | None = None,
          removed: str | None = None) -> None:
    """A target came, changed or went (discovery, a reload): the group sizes follow."""
    if current is None:
        return
    if added is not None:
        current.targets.add(added.name, added.labels)
    if removed is not None:
        current.targets.remove(removed)
