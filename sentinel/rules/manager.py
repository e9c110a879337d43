"""Rule groups evaluated on demand: the rule stage of the pipeline.

The daemon schedules one job per group (`groups`: name → interval) and calls
`evaluate_group(name, now_ms)`; the returned alerts go to the incident stage.
Rules of a group are evaluated in file order at the same `now_ms`, as in
Prometheus; with a store to write to (`store=`), each rule's output
(recorded series, ALERTS/ALERTS_FOR_STATE) is written back before the next
rule runs (see `writeback`). Against a remote backend (the engine's
`rule_pool`), rules that do not read one another run at once, each
query with a deadline inside the group's interval (rules/concurrent.py); a
group that still overruns its interval is logged with its slowest rule and
counted (`group_timing()`). Nothing here reads the clock except to time
evaluations for `rule_health()`; nothing raises out of an evaluation.

Thread safety: groups may be evaluated from scheduler threads while the
daemon reloads or snapshots; one lock guards the group table and each
group has its own evaluation lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sentinel import progress
from sentinel.model import Alert, AlertState, Vector
from sentinel.rules.alerting import AlertingRuleState, ReadyFunc, RuleHealth, TemplateContext
from sentinel.rules.concurrent import RulePool, dependencies
from sentinel.rules.deadline import query_deadline
from sentinel.rules.loader import RecordingRule, Rule, RuleGroup
from sentinel.rules.recording import RecordingRuleState
from sentinel.rules.restore import RestoreSettings, restore_for_state
from sentinel.rules.writeback import Appender, SeriesWriter, rule_output

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_MS = 60_000
# Share of a group's interval its queries may take when rules run concurrently:
# the rest is the margin for writing back and the incident stage.
DEADLINE_SHARE = 0.8


class QueryEngine(Protocol):
    """What the manager needs from PromQL: an instant query at a given time."""

    def query(self, expr: Any, at_ms: int) -> Vector | float:
        """Evaluate `expr` at `at_ms`."""
        ...


@dataclass(frozen=True, slots=True)
class RuleStatus:
    """One rule's health for /metrics and `sentinel rules`."""

    group: str
    rule: str
    health: RuleHealth
    last_error: str
    last_eval_ms: int | None
    last_duration_s: float
    pending: int
    firing: int


@dataclass
class _Group:
    spec: RuleGroup
    interval_ms: int
    rules: list[AlertingRuleState | RecordingRuleState]
    lock: threading.Lock
    durations: dict[int, float]
    writer: SeriesWriter | None = None
    # Which earlier rules each rule waits for when rules run concurrently (rules/concurrent.py).
    deps: list[frozenset[int]] = field(default_factory=list)
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    last_duration_s: float = 0.0
    overruns: int = 0
    slowest: tuple[str, float] | None = None  # (rule, seconds) at the last overrun


@dataclass(frozen=True, slots=True)
class GroupTiming:
    """How long a group's last evaluation took and how often it overran its interval."""

    group: str
    interval_s: float
    last_duration_s: float
    overruns: int
    slowest_rule: str
    slowest_s: float


def _rule_key(r: Rule) -> tuple[str, str, str, int, tuple[tuple[str, str], ...]]:
    """What must be unchanged for a rule to keep its alerts across a reload."""
    return (type(r).__name__, r.name, r.expr, r.for_ms, r.labels)


class RuleManager:
    """Evaluates rule groups against a query engine and holds their alert state."""

    def __init__(
        self,
        groups: Iterable[RuleGroup],
        engine: QueryEngine,
        *,
        default_interval_ms: int = DEFAULT_INTERVAL_MS,
        external_labels: Mapping[str, str] | None = None,
        external_url: str = "",
        store: Appender | None = None,
    ) -> None:
        self.engine = engine
        self.store = store
        self.default_interval_ms = default_interval_ms
        self.context = TemplateContext(dict(external_labels or {}), external_url)
        self._lock = threading.Lock()
        self._groups: dict[str, _Group] = {}
        # Set by the daemon: whether a restored alert's data has answered since start.
        self.ready: ReadyFunc | None = None
        # Set with a remote query backend: whether Sentinel evaluates a recording rule
        # (expression text → bool); the others run in the backend (rules/backend.py).
        self.evaluates_recording: Callable[[str], bool] | None = None
        # Rules of a group run concurrently when the engine brings a pool (a remote
        # backend: rules/backend.py); the embedded store runs one rule at a time.
        self.pool: RulePool | None = getattr(engine, "rule_pool", None)
        self.reload(groups)

    @property
    def groups(self) -> dict[str, int]:
        """Group name → evaluation interval in ms, in file order."""
        with self._lock:
            return {name: g.interval_ms for name, g in self._groups.items()}

    def evaluate_group(self, name: str, now_ms: int) -> list[Alert]:
        """Evaluate every rule of a group: active alerts plus those resolved now.

        A rule whose query fails keeps its alerts unchanged (they are returned
        as they were) and reports health "err"; the other rules still run.
        KeyError for an unknown group name.
        """
        with self._lock:
            group = self._groups[name]
        offset = group.spec.query_offset_ms
        query = self.engine.query
        if offset:
            def query(expr: Any, at_ms: int) -> Vector | float:
                return self.engine.query(expr, at_ms - offset)
        with group.lock:
            # Logged once per new error text, not every evaluation of a failing rule.
            errors = {i: r.last_error for i, r in enumerate(group.rules)
                      if r.health == RuleHealth.ERR}
            results: dict[int, list[Alert]] = {}
            started = time.monotonic()
            if self.pool is None:
                for i in range(len(group.rules)):
                    results[i] = self._eval_rule(group, i, query, now_ms, errors)
            else:
                self._eval_concurrently(group, query, now_ms, errors, results, started)
            if group.writer is not None:
                group.writer.flush_stale(now_ms)
            self._time_group(group, time.monotonic() - started)
        return [a for i in sorted(results) for a in results[i]]

    def _eval_rule(self, group: _Group, i: int, query: Any, now_ms: int,
                   errors: Mapping[int, str]) -> list[Alert]:
        """Evaluate rule `i` of a group and write its output back; its alerts."""
        progress.mark()  # each rule is a unit of work: a long group is busy, not stuck
        rule = group.rules[i]
        name, offset = group.spec.name, group.spec.query_offset_ms
        start = time.perf_counter()
        out: list[Alert] = []
        if isinstance(rule, AlertingRuleState):
            out = rule.eval(query, now_ms, self.context, group.spec.limit, self.ready)
        elif (self.evaluates_recording is not None
              and not self.evaluates_recording(rule.rule.expr)):
            return out  # recorded by the remote backend's own rule evaluator
        else:
            rule.eval(query, now_ms, self.context, group.spec.limit)
        if rule.health == RuleHealth.ERR and rule.last_error != errors.get(i):
            log.warning("rule %s/%s: %s", name, rule.rule.name, rule.last_error)
        if group.writer is not None:
            samples = rule_output(rule, now_ms, offset)
            if samples is not None:
                with group.write_lock:
                    error = group.writer.write(i, samples, now_ms)
                if error:
                    rule.health, rule.last_error = RuleHealth.ERR, error
        group.durations[i] = time.perf_counter() - start
        return out

    def _eval_concurrently(self, group: _Group, query: Any, now_ms: int,
                           errors: Mapping[int, str], results: dict[int, list[Alert]],
                           started: float) -> None:
        """Independent rules at once; each query must answer within the group's interval."""
        assert self.pool is not None
        deadline = started + group.interval_ms / 1000 * DEADLINE_SHARE

        def task(i: int) -> None:
            token = query_deadline.set(deadline)
            try:
                results[i] = self._eval_rule(group, i, query, now_ms, errors)
            except Exception:  # rules record their own errors; this is a bug: log, go on
                log.exception("rule %s/%s", group.spec.name, group.rules[i].rule.name)
                results[i] = []
            finally:
                query_deadline.reset(token)

        # Rules the embedded store answers alone run on this thread (RulePool.run).
        local = getattr(self.engine, "is_local", None)
        inline = [] if local is None else [local(r.rule.expr) for r in group.rules]
        self.pool.run(group.deps, task, inline)

    def _time_group(self, group: _Group, seconds: float) -> None:
        """Record the group's duration; name its slowest rule when it overran its interval."""
        group.last_duration_s = seconds
        if seconds * 1000 <= group.interval_ms or not group.durations:
            return
        group.overruns += 1
        slowest = max(group.durations, key=lambda i: group.durations[i])
        group.slowest = (group.rules[slowest].rule.name, group.durations[slowest])
        log.warning("rule group %s took %.2fs, longer than its interval of %.2fs; "
                    "its slowest rule is %s (%.2fs)", group.spec.name, seconds,
                    group.interval_ms / 1000, *group.slowest)


    def failed_rules(self, name: str) -> int:
        """How many rules of a group failed their last evaluation (health "err"); 0 if unknown."""
        with self._lock:
            group = self._groups.get(name)
        return 0 if group is None else sum(r.health == RuleHealth.ERR for r in group.rules)

    def restore(self, alerts: Iterable[Alert], now_ms: int | None = None,
                settings: RestoreSettings | None = None) -> int:
        """Put persisted PENDING/FIRING alerts back into their rules; returns how many.

        Matched by group, rule name and labels being producible by the rule
        (its alertname); alerts of rules that no longer exist are ignored.
        A firing alert comes back firing, with no new transition to report.
        With `now_ms`, the `for` state is restored as Prometheus's
        RestoreForState does (grace period, outage tolerance; rules/restore.py).
        """
        with self._lock:
            by_rule = {(g.spec.name, r.rule.name): r for g in self._groups.values()
                       for r in g.rules if isinstance(r, AlertingRuleState)}
        n = 0
        for a in alerts:
            rule = by_rule.get((a.group, a.rule))
            if rule is None:
                continue
            if now_ms is not None:
                restored = restore_for_state(a, rule.rule.for_ms, now_ms,
                                             settings or RestoreSettings())
                if restored is None:
                    continue
                a = restored
            if rule.restore(a):
                n += 1
        return n

    def acknowledge(self, alerts: Iterable[Alert]) -> None:
        """The incident stage committed these alerts: resolved ones are reported no more."""
        by_rule: dict[tuple[str, str], list[Alert]] = {}
        for a in alerts:
            if a.resolved_at_ms is not None:
                by_rule.setdefault((a.group, a.rule), []).append(a)
        if not by_rule:
            return
        with self._lock:
            groups = [self._groups[g] for g, _ in by_rule if g in self._groups]
        for g in groups:
            with g.lock:
                for r in g.rules:
                    if isinstance(r, AlertingRuleState):
                        r.acknowledge(by_rule.get((g.spec.name, r.rule.name), []))

    def active_alerts(self) -> list[Alert]:
        """All pending and firing alerts of all groups."""
        with self._lock:
            groups = list(self._groups.values())
        return [a for g in groups for r in g.rules for a in r.active_alerts()]

    def reload(self, groups: Iterable[RuleGroup]) -> None:
        """Swap in a new, already validated rule set, keeping the state of unchanged rules.

        A rule keeps its alerts when its group, name, expression, `for` and
        labels are unchanged (annotations refresh at the next evaluation).
        """
        new: dict[str, _Group] = {}
        with self._lock:
            for spec in groups:
                if spec.name in new:
                    raise ValueError(f'duplicate rule group name "{spec.name}"')
                old = self._groups.get(spec.name)
                pool: dict[Any, list[AlertingRuleState | RecordingRuleState]] = {}
                for r in old.rules if old else []:
                    pool.setdefault(_rule_key(r.rule), []).append(r)
                states: list[AlertingRuleState | RecordingRuleState] = []
                moved: dict[int, int] = {}  # old rule index → new index, for write-back state
                for i, rule in enumerate(spec.rules):
                    state: AlertingRuleState | RecordingRuleState
                    if isinstance(rule, RecordingRule):
                        state = RecordingRuleState(rule, spec.name)
                    else:
                        state = AlertingRuleState(rule, spec.name)
                    same = pool.get(_rule_key(rule))
                    if same:
                        prior = same.pop(0)
                        state.adopt(prior)  # type: ignore[arg-type]  # same key: same type
                        moved[old.rules.index(prior) if old else 0] = i
                    states.append(state)
                interval = spec.interval_ms or self.default_interval_ms
                lock = old.lock if old else threading.Lock()
                writer = SeriesWriter(self.store) if self.store is not None else None
                if old is not None and old.writer is not None and writer is not None:
                    writer.adopt(old.writer, moved, len(old.rules))
                new[spec.name] = _Group(spec, interval, states, lock, {}, writer,
                                        dependencies(spec.rules),
                                        overruns=old.overruns if old else 0)
            self._groups = new

    def group_timing(self) -> list[GroupTiming]:
        """Each group's last duration, its overruns and the slowest rule of the last one."""
        with self._lock:
            groups = list(self._groups.values())
        return [GroupTiming(g.spec.name, g.interval_ms / 1000, g.last_duration_s, g.overruns,
                            *(g.slowest or ("", 0.0))) for g in groups]

    def rule_health(self) -> list[RuleStatus]:
        """Health, last error and alert counts of every rule."""
        with self._lock:
            groups = list(self._groups.values())
        out = []
        for g in groups:
            for i, r in enumerate(g.rules):
                states = [a.state for a in r.active.values()]
                out.append(RuleStatus(
                    group=g.spec.name,
                    rule=r.rule.name,
                    health=r.health,
                    last_error=r.last_error,
                    last_eval_ms=r.last_eval_ms,
                    last_duration_s=g.durations.get(i, 0.0),
                    pending=states.count(AlertState.PENDING),
                    firing=states.count(AlertState.FIRING),
                ))
        return out
