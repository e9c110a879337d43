"""Which rules of a group may run at the same time, and running them so.

Against a remote backend each rule is a round trip, and a group whose rules
run one after another takes the sum of them (issue 40: 9.7 s for a 5 s
interval). As Prometheus's concurrent rule evaluation does, rules that do not
read one another run at once; a rule that reads another rule's output (a
recording rule's name, or ALERTS for an alerting rule) keeps its file order
relative to it, so it sees the result of the same evaluation, as in a
sequential run. A selector without a metric name, or an expression Sentinel
cannot parse, may read anything: it is ordered against every rule that writes.

Bounds: `per_group` rules of one group at once, and the shared pool's size
over all groups.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from sentinel.promql.compile import compile_expr
from sentinel.promql.errors import PromQLError
from sentinel.rules.loader import RecordingRule, Rule
from sentinel.rules.needs import _name_matchers, _selectors

ALERT_SERIES = frozenset({"ALERTS", "ALERTS_FOR_STATE"})
ANY = "*"  # reads: may read any series


def _writes(rule: Rule) -> frozenset[str]:
    return frozenset({rule.name}) if isinstance(rule, RecordingRule) else ALERT_SERIES


def _reads(rule: Rule) -> frozenset[str]:
    node = rule.query
    try:
        if node is None or isinstance(node, str):
            node = compile_expr(rule.expr)
    except PromQLError:
        return frozenset({ANY})
    names = set()
    for sel in _selectors(node):
        name, _ = _name_matchers(sel)
        names.add(ANY if name is None else name)
    return frozenset(names)


def dependencies(rules: Sequence[Rule]) -> list[frozenset[int]]:
    """For each rule, the earlier rules it must wait for.

    Two rules are ordered when one reads what the other writes; the earlier
    in the file goes first, so every rule sees what a sequential run shows it.
    """
    reads = [_reads(r) for r in rules]
    writes = [_writes(r) for r in rules]

    def touches(reader: int, writer: int) -> bool:
        return ANY in reads[reader] or bool(reads[reader] & writes[writer])

    return [frozenset(i for i in range(j) if touches(j, i) or touches(i, j))
            for j in range(len(rules))]


class RulePool:
    """The threads rules run on, shared by every group (the overall bound)."""

    def __init__(self, workers: int = 16, per_group: int = 8) -> None:
        self.per_group = max(1, per_group)
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers),
                                        thread_name_prefix="sentinel-rules")
        self._lock = threading.Lock()

    def run(self, deps: Sequence[frozenset[int]], task: Callable[[int], Any],
            inline: Sequence[bool] = ()) -> None:
        """Run `task(i)` for every rule once its dependencies have finished.

        Rules marked `inline` (answered by the embedded store: no round trip to
        wait on) run on the calling thread, after the ready remote rules have
        been handed to the pool: they never wait for a pool thread that a slow
        backend holds, so a group of Sentinel's own rules keeps its interval
        while another group's queries hang until their deadline (issue 40).
        """
        waiting = list(range(len(deps)))
        done: set[int] = set()
        running: dict[Future[Any], int] = {}
        while waiting or running:
            ready = [i for i in waiting if deps[i] <= done]
            here = [i for i in ready if i < len(inline) and inline[i]]
            remote = [i for i in ready if not (i < len(inline) and inline[i])]
            for i in remote[: self.per_group - len(running)]:
                waiting.remove(i)
                running[self._pool.submit(task, i)] = i
            for i in here:
                waiting.remove(i)
                task(i)
                done.add(i)
            if here:  # what finished meanwhile; rules they unblocked are ready next turn
                finished = {f for f in running if f.done()}
            else:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                done.add(running.pop(f))
                f.result()  # a task does not raise (the manager's task catches); if it did: say so

    def close(self) -> None:
        """Stop the threads once their rules are done."""
        self._pool.shutdown(wait=False)
