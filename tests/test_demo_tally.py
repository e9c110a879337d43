"""How the demo and bench/pagestream.py count what reached people (sentinel/demo/tally.py)."""

from __future__ import annotations

from sentinel.demo.tally import (
    APART,
    OTHER,
    Counts,
    false_resolves,
    silent,
    table,
    tally,
    targets_of,
)


def _msg(status: str, group: str, *targets: str) -> dict:
    return {"status": status, "groupKey": group,
            "alerts": [{"labels": {"alertname": "A", "target": t}} for t in targets]}


def test_a_new_group_pages_a_known_one_updates_and_resolved_is_its_own_column() -> None:
    pager = [(0.0, _msg("firing", "g1", "a"), {}), (1.0, _msg("firing", "g1", "a"), {}),
             (2.0, _msg("firing", "g2", "a"), {}), (3.0, _msg("resolved", "g1", "a"), {})]
    chat = [(0.5, _msg("firing", "c1", "a"), {}), (0.6, _msg("resolved", "c1", "b"), {})]
    counts = tally({"pager": pager, "chat": chat}, "pager", {"a": "one", "b": "two"})
    assert counts == {"one": Counts(pages=2, updates=1, resolved=1, notifications=1),
                      "two": Counts(notifications=1)}


def test_a_redelivery_counts_once_and_unknown_targets_are_set_apart() -> None:
    key = {"Idempotency-Key": "k1"}
    pager = [(0.0, _msg("firing", "g1", "a"), key), (1.0, _msg("firing", "g1", "a"), key),
             (2.0, _msg("firing", "g9", "zz"), {}), (3.0, {"status": "firing"}, {})]
    counts = tally({"pager": pager}, "pager", {"a": "one"})
    assert counts["one"] == Counts(pages=1)
    assert counts[OTHER] == Counts(pages=2)


def test_a_message_about_two_scenarios_counts_for_both() -> None:
    counts = tally({"pager": [(0.0, _msg("firing", "g", "a", "b"), {})]}, "pager",
                   {"a": "one", "b": "two"})
    assert counts == {"one": Counts(pages=1), "two": Counts(pages=1)}


def test_targets_are_found_wherever_a_message_names_them() -> None:
    body = {"commonLabels": {"target": "x"}, "alerts": [{"labels": {"target": "y"}}],
            "annotations": {"text": "target: z"}, "extra": [{"target": 3}]}
    assert targets_of(body) == {"x", "y"}


def test_table_aligns_columns() -> None:
    assert table(("a", "bb"), [(1, 22), ("xyz", 3)]).splitlines() == [
        "a    bb", "---  --", "1    22", "xyz  3"]


def test_alerts_set_apart_count_on_their_own_row() -> None:
    own = {"status": "firing", "groupKey": "s", "alerts": [
        {"labels": {"alertname": "SentinelMissedScrapes", "target": "a"}}]}
    mixed = {"status": "firing", "groupKey": "m", "alerts": [
        {"labels": {"alertname": "SentinelMissedScrapes", "target": "a"}},
        {"labels": {"alertname": "A", "target": "a"}}]}
    counts = tally({"pager": [(0.0, own, {}), (1.0, mixed, {})]}, "pager", {"a": "one"},
                   apart={"SentinelMissedScrapes"})
    assert counts == {APART: Counts(pages=1), "one": Counts(pages=1)}


def test_an_update_message_is_an_update_even_in_a_group_not_seen_paging() -> None:
    counts = tally({"pager": [(0.0, _msg("update", "g7", "a"), {})]}, "pager", {"a": "one"})
    assert counts == {"one": Counts(updates=1)}


def test_a_resolve_is_false_only_while_a_target_it_names_is_failing() -> None:
    spans = {"a": [(10.0, 40.0)], "b": [(10.0, None)]}
    pager = [(5.0, _msg("resolved", "g", "a"), {}),     # before the failure: not false
             (20.0, _msg("resolved", "g", "a"), {}),    # during: false
             (40.0, _msg("resolved", "g", "a"), {}),    # the instant it serves again: not
             (20.0, _msg("firing", "g", "a"), {}),      # not a resolve
             (99.0, _msg("resolved", "g", "a", "b"), {})]  # b never came back: false
    assert false_resolves(pager, spans, {"a": "one", "b": "two"}) == {"one": [20.0],
                                                                      "two": [99.0]}


def test_a_false_resolve_counts_once_a_message_and_not_for_self_monitoring() -> None:
    key = {"Idempotency-Key": "k"}
    own = {"status": "resolved", "groupKey": "s", "alerts": [
        {"labels": {"alertname": "SentinelMissedScrapes", "target": "a"}}]}
    pager = [(1.0, _msg("resolved", "g", "a", "a2"), key), (2.0, _msg("resolved", "g", "a"), key),
             (3.0, own, {})]
    counts = false_resolves(pager, {"a": [(0.0, None)], "a2": [(0.0, None)]},
                            {"a": "one", "a2": "one"}, apart={"SentinelMissedScrapes"})
    assert counts == {"one": [1.0]}


def test_an_open_failure_no_message_named_is_silent() -> None:
    pager = [(1.0, _msg("firing", "g", "a"), {}),      # before b's failure began
             (5.0, _msg("update", "g", "c"), {}),      # an update names c: told
             (6.0, _msg("resolved", "g", "b"), {})]    # a resolve tells nobody of a failure
    counts = silent(pager, {"a": 0.0, "b": 2.0, "c": 2.0, "d": 2.0},
                    {"a": "one", "b": "two", "c": "two", "d": "two"})
    assert counts == {"two": 2}
