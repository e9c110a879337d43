"""Pure decisions of the notify stage: matchers, routing, grouping, muting (one row per reason)."""

from __future__ import annotations

import pytest

from sentinel.config.notify import InhibitRuleConfig, RouteConfig
from sentinel.model import labels_of
from sentinel.respond.notify.grouping import idempotency_key, needs_update
from sentinel.respond.notify.matchers import parse_matcher
from sentinel.respond.notify.mute import InhibitRule, Silence, mute_reason
from sentinel.respond.notify.routing import build_route, match_routes


@pytest.mark.parametrize(("text", "labels", "hit"), [
    ('severity="page"', {"severity": "page"}, True),
    ("severity=page", {"severity": "warn"}, False),
    ("severity!=page", {}, True),
    ("target=~gemma-.*", {"target": "gemma-26b"}, True),
    ("target=~gemma", {"target": "gemma-26b"}, False),  # anchored
    ("target!~gemma-.*", {"target": "llama"}, True),
    ('x=""', {}, True),  # a missing label matches as ""
])
def test_matchers(text: str, labels: dict[str, str], hit: bool) -> None:
    assert parse_matcher(text).matches(labels_of(labels)) is hit


def test_bad_matchers_raise() -> None:
    for text in ("no-op", "a=~(", "1a=b"):
        with pytest.raises(ValueError):
            parse_matcher(text)


ROUTE = RouteConfig.model_validate({
    "receiver": "default", "group_by": ["alertname"], "routes": [
        {"matchers": ["severity=page"], "receiver": "pager", "continue": True,
         "group_by": ["alertname", "target"]},
        {"matchers": ["team=ml"], "receiver": "ml-chat", "routes": [
            {"matchers": ["alertname=Noisy"], "receiver": "null"}]},
        {"matchers": ["team=~.+"], "receiver": "teams"},
    ]})


@pytest.mark.parametrize(("labels", "receivers"), [
    ({"alertname": "A"}, ["default"]),
    ({"alertname": "A", "severity": "page"}, ["pager"]),  # a child matched: not the root
    ({"alertname": "A", "severity": "page", "team": "ml"}, ["pager", "ml-chat"]),
    ({"alertname": "Noisy", "team": "ml"}, ["null"]),  # first match stops without continue
    ({"alertname": "A", "team": "infra"}, ["teams"]),
])
def test_routing_follows_alertmanager(labels: dict[str, str], receivers: list[str]) -> None:
    root = build_route(ROUTE, [])
    assert root is not None
    assert [r.receiver for r in match_routes(root, labels_of(labels))] == receivers


def test_children_inherit_and_group_keys_differ_by_group_labels() -> None:
    root = build_route(ROUTE, [])
    assert root is not None
    pager = root.children[0]
    assert (pager.group_wait_ms, pager.group_interval_ms) == (30_000, 300_000)
    a = labels_of({"alertname": "A", "target": "x", "severity": "page"})
    b = labels_of({"alertname": "A", "target": "y", "severity": "page"})
    assert root.group_key(a) == root.group_key(b)
    assert pager.group_key(a) != pager.group_key(b)


def test_implicit_route_sends_every_alert_to_every_receiver() -> None:
    root = build_route(None, ["a", "b"])
    assert root is not None
    routes = match_routes(root, labels_of({"alertname": "X", "target": "t"}))
    # Grouped by target (issue 33): one server's alerts are one message, one page.
    assert [(r.receiver, r.group_wait_ms, r.group_by) for r in routes] == [
        ("a", 0, ("target", "fleet")), ("b", 0, ("target", "fleet"))]
    assert build_route(None, []) is None
    other = match_routes(root, labels_of({"alertname": "Y", "target": "t"}))
    assert [r.group_key(labels_of({"alertname": "Y", "target": "t"})) for r in other] == [
        r.group_key(labels_of({"alertname": "X", "target": "t"})) for r in routes]


H = 3600_000


@pytest.mark.parametrize(("why", "kw", "send"), [
    ("never sent, something fires", dict(last_sent_ms=None, firing={"a"}), True),
    ("never sent, only resolved", dict(last_sent_ms=None, resolved={"a"}), False),
    ("a new alert fires", dict(sent_firing={"a"}, firing={"a", "b"}), True),
    ("nothing changed", dict(sent_firing={"a"}, firing={"a"}), False),
    ("repeat interval passed", dict(sent_firing={"a"}, firing={"a"}, now_ms=4 * H + 1), True),
    ("all resolved", dict(sent_firing={"a"}, resolved={"a"}), True),
    ("all resolved, none announced", dict(sent_firing=set(), resolved={"a"}), False),
    ("one resolved, send_resolved", dict(sent_firing={"a", "b"}, firing={"a"},
                                         resolved={"b"}), True),
    ("one resolved, no send_resolved", dict(sent_firing={"a", "b"}, firing={"a"},
                                            resolved={"b"}, send_resolved=False), False),
])
def test_needs_update(why: str, kw: dict[str, object], send: bool) -> None:
    args: dict[str, object] = dict(sent_firing=set(), sent_resolved=set(), firing=set(),
                                   resolved=set(), send_resolved=True, last_sent_ms=1,
                                   now_ms=2, repeat_ms=4 * H)
    args.update(kw)
    assert needs_update(**args) is send, why  # type: ignore[arg-type]


def test_idempotency_key_is_stable_and_changes_with_the_message() -> None:
    k = idempotency_key("g", 1, 1, ["a"], [])
    assert k == idempotency_key("g", 1, 1, ["a"], []) and len(k) == 32
    assert k != idempotency_key("g", 1, 2, ["a"], [])
    assert k != idempotency_key("g", 2, 1, ["a"], [])


RULE = InhibitRule.from_config(InhibitRuleConfig.model_validate({
    "source_matchers": ["alertname=TargetDown"], "target_matchers": ["severity!=none"],
    "equal": ["target"]}))
SILENCE = Silence(3, (parse_matcher("target=maint"),), 0, 100, "alice", "upgrade")


@pytest.mark.parametrize(("labels", "firing", "now", "reason"), [
    ({"alertname": "KV", "target": "maint"}, [], 50, "silenced by silence 3 by alice: upgrade"),
    ({"alertname": "KV", "target": "maint"}, [], 100, None),  # the silence ended
    ({"alertname": "KV", "target": "a"}, [{"alertname": "TargetDown", "target": "a"}], 50,
     'inhibited by TargetDown {alertname="TargetDown", target="a"}'),
    ({"alertname": "KV", "target": "a"}, [{"alertname": "TargetDown", "target": "b"}], 50, None),
    ({"alertname": "TargetDown", "target": "a"}, [{"alertname": "TargetDown", "target": "a"}],
     50, None),  # an alert never inhibits itself
    ({"alertname": "KV", "target": "a"}, [], 50, None),
])
def test_mute_reasons(labels: dict[str, str], firing: list[dict[str, str]], now: int,
                      reason: str | None) -> None:
    got = mute_reason(labels_of(labels), [SILENCE], [RULE], [labels_of(f) for f in firing], now)
    assert (got.text if got else None) == reason
