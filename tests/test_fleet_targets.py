"""The targets a fleet is counted over follow discovery and reloads (issue 49).

Group sizes (the 20 % of a pool) were the configured targets' at start, so targets found
in Kubernetes counted by `min_targets` only. Here: the bookkeeping's invariant (any
sequence of adds and removes leaves each group's size equal to a recount), a pool of
discovered targets opening a fleet incident by its fraction, and the daemon with the
fake Kubernetes API and a reload of `fleet:` that keeps what is open."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.kube_server import FakeKube, pod
from fixtures_e2e import wait_for
from hypothesis import given
from hypothesis import strategies as st
from test_fleet_incidents import T0, S, fleet_incidents

from sentinel.config import TargetConfig, load_config
from sentinel.daemon import fleetwiring
from sentinel.daemon.app import App
from sentinel.incidents import Database, IncidentTracker
from sentinel.incidents.fleet import FleetPolicy
from sentinel.incidents.fleet_hook import FleetCorrelator
from sentinel.incidents.fleet_targets import FleetTargets
from sentinel.model import Alert, AlertState, labels_of

NS = "inference"
POOL = (("pool", "a100"),)

_ops = st.lists(st.tuples(st.booleans(), st.sampled_from(["a", "b", "c", "d", "e"]),
                          st.sampled_from(["a100", "h100", ""])), max_size=40)


@given(_ops)
def test_group_sizes_always_equal_a_recount(ops: list[tuple[bool, str, str]]) -> None:
    targets = FleetTargets(("pool",))
    model: dict[str, str] = {}
    for add, name, pool in ops:
        if add:
            targets.add(name, {"pool": pool} if pool else {})
            model[name] = pool
        else:
            targets.remove(name)
            model.pop(name, None)
    for pool in ("a100", "h100", ""):
        assert targets.size((("pool", pool),)) == sum(1 for p in model.values() if p == pool)
    assert set(targets.snapshot()) == set(model)


def kv(target: str) -> Alert:
    labels = labels_of({"alertname": "KV", "target": target, "severity": "warning"})
    return Alert(group="vllm", rule="KV", labels=labels, annotations=(),
                 state=AlertState.FIRING, value=0.9, active_at_ms=T0 - 30 * S,
                 last_eval_ms=T0, fired_at_ms=T0)


def test_a_discovered_pool_opens_by_its_fraction(incident_db: Database) -> None:
    """Ten pods of pool a100 found by discovery: three failing is 20 % of the pool (the
    fraction rule), where before they counted against `min_targets` (10) only."""
    fleet = FleetCorrelator(FleetPolicy(min_targets=10, min_fraction=0.2, group_by=("pool",)))
    tracker = IncidentTracker(incident_db, fleet=fleet)
    tracker.process([kv(f"p{i}") for i in range(3)], T0)
    assert fleet_incidents(incident_db) == []  # unknown size: 3 of ? is not a fleet
    for i in range(10):
        fleetwiring.track(fleet, added=TargetConfig.model_construct(
            name=f"p{i}", url="http://127.0.0.1:9", labels={"pool": "a100"}))
    assert fleet.targets.size(POOL) == 10
    tracker.process([kv(f"p{i}") for i in range(3, 6)], T0 + S)
    [fi] = fleet_incidents(incident_db)
    assert "of 10 targets" in fi.summary
    fleetwiring.track(fleet, removed="p9")
    assert fleet.targets.size(POOL) == 9


def _config(tmp_path: Path, api_url: str, fleet: str) -> Path:
    cfg = tmp_path / "sentinel.yaml"
    # A rule that only ever pends: the pods do not answer, and the shipped target-down
    # rules would open a fleet incident once min_targets drops to 3 (a grouping change
    # then waits for it to end), while evaluations still read the fleet state back.
    (tmp_path / "rules.yaml").write_text(
        "groups:\n  - name: g\n    rules:\n"
        "      - {alert: Waiting, expr: 'up >= 0', for: 1h}\n")
    cfg.write_text(f"""\
database: sqlite:///{tmp_path}/s.db
listen: 127.0.0.1:0
rule_files: [rules.yaml]
scrape_interval: 1s
scrape_timeout: 500ms
kubernetes_sd:
  - name: vllm
    api: {{api_server: "{api_url}"}}
    namespaces: [{NS}]
    label_selector: app=vllm
    port: http
fleet: {fleet}
""")
    return cfg


@pytest.mark.integration
def test_the_daemon_counts_discovered_pods_and_reloads_fleet_in_place(tmp_path: Path) -> None:
    api = FakeKube().start()
    for i in range(4):  # nothing serves on the pods' port: only the count matters here
        api.put("pods", pod(f"vllm-{i}", namespace=NS, ip="127.0.0.2", port=9,
                            labels={"app": "vllm"}))
    group = (("namespace", NS),)
    cfg = _config(tmp_path, api.url, "{group_by: [namespace], min_targets: 10}")
    app = App(load_config(cfg), loader=lambda: load_config(cfg), source=str(cfg))
    app.start()
    try:
        assert app.pipeline is not None
        fleet = app.pipeline.tracker.fleet
        assert fleet is not None
        wait_for(lambda: fleet.targets.size(group) == 4, 60, "the four pods counted")
        api.remove("pods", NS, "vllm-3")
        wait_for(lambda: fleet.targets.size(group) == 3, 60, "the removed pod uncounted")
        # A reload changes `fleet:` in place: the same correlator (its state, its counts).
        cfg.write_text(cfg.read_text().replace("min_targets: 10",
                                               "min_targets: 3, breakdown_by: [pod]"))
        assert app.reload(), "a fleet: change reloads without a restart"
        assert app.pipeline.tracker.fleet is fleet
        assert fleet.policy.min_targets == 3 and fleet.targets.size(group) == 3
        # Turned off: no new fleet incident opens; the open ones would run to their end.
        cfg.write_text(cfg.read_text().replace("fleet: {", "fleet: {enabled: false, "))
        assert app.reload()
        assert app.pipeline.tracker.fleet is fleet and fleet.policy.enabled is False
        # Its grouping is a restart key while on.
        cfg.write_text(cfg.read_text().replace("enabled: false, ", "")
                       .replace("group_by: [namespace]", "group_by: [pod]"))
        # Nothing is open, as read back from the database by an evaluation.
        wait_for(lambda: not fleet.any_open(), 60, "the fleet state read back")
        assert app.reload(), "off before: a new grouping applies (nothing was open)"
        assert app.pipeline.tracker.fleet is not fleet
        new = app.pipeline.tracker.fleet
        assert new is not None and new.policy.group_by == ("pod",)
        assert new.targets.size((("pod", "vllm-0"),)) == 1  # the discovered pods, counted
        cfg.write_text(cfg.read_text().replace("group_by: [pod]", "group_by: [namespace]"))
        refused = app.reload()
        assert not refused and "fleet.group_by: changed" in refused.message
    finally:
        app.stop()
        api.stop()


@pytest.mark.integration
def test_turned_on_by_a_reload(tmp_path: Path) -> None:
    api = FakeKube().start()
    api.put("pods", pod("vllm-0", namespace=NS, ip="127.0.0.2", port=9, labels={"app": "vllm"}))
    cfg = _config(tmp_path, api.url, "{enabled: false}")
    app = App(load_config(cfg), loader=lambda: load_config(cfg), source=str(cfg))
    app.start()
    try:
        assert app.pipeline is not None and app.pipeline.tracker.fleet is None
        assert app.discovered is not None
        wait_for(lambda: app.discovered.targets(), 60, "the pod discovered")
        cfg.write_text(cfg.read_text().replace("{enabled: false}", "{group_by: [namespace]}"))
        assert app.reload()
        fleet = app.pipeline.tracker.fleet
        assert fleet is not None and fleet.targets.size((("namespace", NS),)) == 1
    finally:
        app.stop()
        api.stop()
