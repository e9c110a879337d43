"""The daemon's collector policy: the evaluation hold, shared by overlapping rule groups."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest
from fixtures_e2e import wait_for

from sentinel.config import load_config
from sentinel.daemon import gcpolicy
from sentinel.daemon.app import App
from sentinel.daemon.gcpolicy import EvaluationHold


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    gc.enable() if was else gc.disable()


def test_the_collector_is_off_while_any_holder_is_in_and_on_after_the_last() -> None:
    hold = EvaluationHold()
    first, second = hold.held(), hold.held()
    first.__enter__()
    assert not gc.isenabled()
    second.__enter__()
    first.__exit__(None, None, None)  # holders need not leave in the order they came
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()
    with hold.held():  # and it holds again afterwards
        assert not gc.isenabled()
    assert gc.isenabled()


def test_holders_on_other_threads_share_the_hold() -> None:
    hold = EvaluationHold()
    inside, leave = threading.Barrier(3), threading.Event()
    seen: list[bool] = []

    def group() -> None:
        with hold.held():
            inside.wait(5)
            leave.wait(5)
            seen.append(gc.isenabled())

    threads = [threading.Thread(target=group) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait(5)
    assert not gc.isenabled()
    leave.set()
    for t in threads:
        t.join(5)
    assert seen == [False, False]  # the first out did not let go for the other
    assert gc.isenabled()


def test_a_collector_disabled_by_someone_else_stays_disabled() -> None:
    gc.disable()
    with EvaluationHold().held():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_exception_in_the_evaluation_still_lets_the_collector_run() -> None:
    hold = EvaluationHold()
    with pytest.raises(RuntimeError), hold.held():
        raise RuntimeError("a rule failed")
    assert gc.isenabled()


def test_a_hold_longer_than_its_limit_is_let_go_whatever_still_evaluates() -> None:
    clock = FakeClock()
    hold = EvaluationHold(max_s=10, clock=clock)
    slow = hold.held()
    slow.__enter__()
    clock.now += 5
    with hold.held():  # an overlapping group within the limit: still held
        assert not gc.isenabled()
    assert not gc.isenabled()
    clock.now += 6  # 11 s: a group that comes now lets it go
    with hold.held():
        assert gc.isenabled()
    with hold.held():  # and the groups that overlap the slow one no longer hold it
        assert gc.isenabled()
    slow.__exit__(None, None, None)
    assert gc.isenabled()
    with hold.held():  # once nothing evaluates, the next evaluation holds again
        assert not gc.isenabled()


def test_release_overdue_lets_go_of_a_group_stuck_evaluating() -> None:
    clock = FakeClock()
    hold = EvaluationHold(max_s=10, clock=clock)
    with hold.held():
        hold.release_overdue()
        assert not gc.isenabled()  # not yet overdue
        clock.now += 11
        hold.release_overdue()  # the daemon's housekeeping job calls it
        assert gc.isenabled()
    assert gc.isenabled()


def test_without_tune_the_hold_does_nothing(monkeypatch) -> None:
    monkeypatch.setattr(gcpolicy, "_hold", None)  # tests and tools: Python's own collector
    with gcpolicy.evaluation_hold():
        assert gc.isenabled()
    gcpolicy.release_overdue()


RULES = """\
groups:
  - name: g
    rules:
      - alert: Always
        expr: vector(1) > 0
"""


def test_the_daemon_evaluates_its_rule_groups_with_the_collector_held(tmp_path, monkeypatch):
    monkeypatch.setattr(gcpolicy, "_hold", EvaluationHold())  # as `tune` installs it
    (tmp_path / "rules.yaml").write_text(RULES)
    (tmp_path / "sentinel.yaml").write_text(
        f"database: sqlite:///{tmp_path / 'sentinel.db'}\nlisten: 127.0.0.1:0\n"
        "rule_files: [rules.yaml]\nevaluation_interval: 1s\nprobe_interval: 0s\n"
        "targets: []\n")
    app = App(load_config(tmp_path / "sentinel.yaml"))
    app.start()
    try:
        assert app.pipeline is not None
        evaluate = app.pipeline.evaluate
        during: list[bool] = []

        def recording(group: str, now_ms: int):  # noqa: ANN202 (the pipeline's own type)
            during.append(gc.isenabled())
            return evaluate(group, now_ms)

        monkeypatch.setattr(app.pipeline, "evaluate", recording)
        wait_for(lambda: len(during) >= 2, 10, "two evaluations")
        assert not any(during)
    finally:
        app.stop(5)
    assert gc.isenabled()
