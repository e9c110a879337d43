"""What does the incident stage cost the evaluation thread when a whole fleet fails together?

Run: `python bench/incident_stage.py --targets 1000 [--db-url URL] [--rounds 3]`.

In process, no network: an `IncidentTracker` with the outbox (as the daemon runs
it) on a fresh SQLite file (or `--db-url`, e.g. a PostgreSQL you run), and the
rule engine's alert-state delta written in the same transaction. Every target's
VLLMRequestsQueued goes pending, then fires in one evaluation; it prints the CPU
seconds (this process) of:

- the evaluation that opens every target's incident (issue 49: incidents opened
  in batches, incidents/opening.py);
- an evaluation in which every alert still fires and nothing changed (the mean of
  `--rounds`; incidents/quiet.py);
- the evaluation in which every alert resolves.

The database's own CPU (PostgreSQL's backend) is not counted. Compare runs of one
machine; another checkout runs with `PYTHONPATH=DIR python bench/incident_stage.py`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace

from sentinel.incidents import Database, IncidentTracker
from sentinel.incidents.alert_states import AlertStateJournal
from sentinel.model import Alert, AlertState, labels_of
from sentinel.respond.notify.outbox import Outbox

T0 = 1_795_255_205_000
GROUP = "vllm"


def _alert(target: str) -> Alert:
    return Alert(group=GROUP, rule="VLLMRequestsQueued",
                 labels=labels_of({"alertname": "VLLMRequestsQueued", "target": target,
                                   "severity": "warning"}),
                 annotations=labels_of({"summary": f"3 requests queued on {target}"}),
                 state=AlertState.FIRING, value=3.0, active_at_ms=T0 - 30_000,
                 last_eval_ms=T0, fired_at_ms=T0)


def main() -> None:
    """Run the three evaluations and print their CPU seconds."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3, help="evaluations with nothing new")
    ap.add_argument("--db-url", help="default: a fresh SQLite file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="incident-stage-") as tmp:
        db = Database(args.db_url or f"sqlite:///{tmp}/sentinel.db")
        db.upgrade()
        tracker = IncidentTracker(db, outbox=Outbox(None), serving=lambda target: True)
        journal = AlertStateJournal()

        def evaluate(alerts: list[Alert], now_ms: int) -> float:
            delta = journal.delta(GROUP, alerts, now_ms)
            t0 = time.process_time()
            tracker.process(alerts, now_ms, states=delta)
            journal.committed(delta)
            return time.process_time() - t0

        firing = [_alert(f"t{i}") for i in range(args.targets)]
        evaluate([replace(a, state=AlertState.PENDING, fired_at_ms=None) for a in firing],
                 T0 - 5_000)
        opened = evaluate(firing, T0)
        steady = [evaluate(firing, T0 + 5_000 * k) for k in range(1, args.rounds + 1)]
        at = T0 + 60_000
        resolved = evaluate([replace(a, state=AlertState.INACTIVE, resolved_at_ms=at,
                                     last_eval_ms=at) for a in firing], at)
        db.dispose()
    print(f"{args.targets} targets ({'SQLite' if not args.db_url else args.db_url.split(':')[0]}),"
          " CPU seconds of the evaluation thread:")
    print(f"  every incident opened in one evaluation  {opened:.2f}")
    print(f"  an evaluation with nothing new (mean)    {sum(steady) / len(steady):.3f}")
    print(f"  every alert resolved in one evaluation   {resolved:.2f}")


if __name__ == "__main__":
    main()
