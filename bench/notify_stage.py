"""What does the notify worker's run cost when a storm's intents wait for it?

Run: `python bench/notify_stage.py --intents 1000 [--db-url URL] [--profile 25]`.

In process, no network: an `IncidentTracker` with the outbox (as the daemon runs
it, no fleet correlation: one incident and one intent per target, the worst case)
opens `--intents` incidents in one evaluation on a fresh SQLite file (or
`--db-url`, e.g. a PostgreSQL you run). Then the notify worker's dispatch runs as
the daemon wires it (the implicit route, one group per target, `group_wait` 0,
the shipped inhibition rules, the act-first annotations) until every intent is
dispatched. It prints the CPU seconds (this process) and the wall of that work,
the transactions it took (issue 49: a run commits every `CHUNK` intents), the
longest of them (what an evaluation's write waits for at most on SQLite), the
messages made and the statements it ran by kind (SELECT counts: the intake must
not read once per intent). `--profile N` adds cProfile's top N functions by
cumulative time.

The database's own CPU (PostgreSQL's backend) is not counted. Compare runs of one
machine; another checkout runs with `PYTHONPATH=DIR python bench/notify_stage.py`.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from collections import Counter
from dataclasses import replace
from typing import Any

from sqlalchemy import event

from sentinel.config.notify import default_inhibit_rules
from sentinel.incidents import Database, IncidentTracker
from sentinel.incidents.convert import ms_to_dt
from sentinel.model import Alert, AlertState, labels_of
from sentinel.respond.notify import actfirst
from sentinel.respond.notify.dispatcher import Dispatcher, DispatchSettings
from sentinel.respond.notify.mute import InhibitRule
from sentinel.respond.notify.outbox import Outbox
from sentinel.respond.notify.routing import build_route

T0 = 1_795_255_205_000


def _alert(target: str) -> Alert:
    return Alert(group="vllm", rule="VLLMRequestsQueued",
                 labels=labels_of({"alertname": "VLLMRequestsQueued", "target": target,
                                   "severity": "warning"}),
                 annotations=labels_of({"summary": f"3 requests queued on {target}"}),
                 state=AlertState.FIRING, value=3.0, active_at_ms=T0 - 30_000,
                 last_eval_ms=T0, fired_at_ms=T0)


def _count_statements(db: Database) -> Counter[str]:
    kinds: Counter[str] = Counter()

    def seen(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        kinds[statement.lstrip().split(None, 1)[0].upper()] += 1

    event.listen(db.engine, "before_cursor_execute", seen)
    return kinds


def main() -> None:
    """Open the incidents, then time and count the dispatch of their intents."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--intents", type=int, default=1000)
    ap.add_argument("--db-url", help="default: a fresh SQLite file")
    ap.add_argument("--no-inhibit", action="store_true",
                    help="without the shipped inhibition rules (the daemon's default)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="print cProfile's top N functions (cumulative)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="notify-stage-") as tmp:
        db = Database(args.db_url or f"sqlite:///{tmp}/sentinel.db")
        db.upgrade()
        outbox = Outbox(None)
        tracker = IncidentTracker(db, outbox=outbox, serving=lambda target: True)
        firing = [_alert(f"t{i}") for i in range(args.intents)]
        tracker.process([replace(a, state=AlertState.PENDING, fired_at_ms=None)
                         for a in firing], T0 - 5_000)
        tracker.process(firing, T0)
        inhibits = () if args.no_inhibit else tuple(
            InhibitRule.from_config(r) for r in default_inhibit_rules())
        settings = DispatchSettings(build_route(None, ["hook"]), inhibits,
                                    annotations=actfirst.with_act_first(None))
        dispatcher = Dispatcher(db, outbox, settings)
        kinds = _count_statements(db)
        profiler = cProfile.Profile() if args.profile else None
        runs: list[float] = []
        intents = messages = 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if profiler:
            profiler.enable()
        while True:
            t0 = time.perf_counter()
            stats = dispatcher.run(T0 + 1_000)
            runs.append(time.perf_counter() - t0)
            intents += stats.intents
            messages += stats.messages
            if not getattr(stats, "more", False):  # a checkout before chunking: one run
                break
        if profiler:
            profiler.disable()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        # The notify worker's act-first round, as every run_once does it after the
        # dispatch (late runbooks as updates, held pages whose grace ran out).
        cpu1, wall1 = time.process_time(), time.perf_counter()
        with db.session() as s:
            actfirst.updates(s, lambda s, i: {}, ms_to_dt(T0 + 1_000))
            actfirst.expire(s, ms_to_dt(T0 + 1_000))
        round_cpu, round_wall = time.process_time() - cpu1, time.perf_counter() - wall1
        db.dispose()
    where = "SQLite" if not args.db_url else args.db_url.split(":")[0]
    print(f"{args.intents} intents ({where}), the notify worker's dispatch:")
    per = 1000 * cpu / max(intents, 1)
    print(f"  CPU {cpu:.2f} s, wall {wall:.2f} s ({per:.2f} ms CPU an intent)")
    print(f"  transactions {len(runs)}, the longest {max(runs):.2f} s")
    print(f"  intents dispatched {intents}, messages {messages}")
    print("  statements: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    print(f"  then the act-first round: CPU {round_cpu:.2f} s, wall {round_wall:.2f} s "
          "(one transaction)")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)


if __name__ == "__main__":
    main()
