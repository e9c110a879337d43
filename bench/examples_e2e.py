"""Every shipped example config, end to end, against issue 48's four failures, in real time.

Each of deploy/examples/*.yaml (gpu-fleet, kubernetes, minimal, tpu-v6e) is loaded as
shipped with only its addresses changed (tests/examples_config.py) and meets four
failures (tests/examples_cases.py says how each example meets each):

    fixed      a crash that a policy fixes: 0 pages, 1 "fixed" notice where the example
               names a chat receiver
    refused    a crash whose restart is refused, the server down 7 minutes: 1 page,
               0 resolved until it serves
    no-policy  a crash no policy covers, the server back after 2.5 minutes: 1 page,
               resolved within one evaluation + group_interval of serving again (counted
               from when a health probe can see it: + the 15 s probe interval)
    down       a target down with no crash line: 1 page

The 7 and 2.5 minutes are real (--scale 1): 7 minutes outlasts the crash counter's
5-minute window. None of the examples pushes to an Alertmanager, so none is started.
Every case runs its own daemon in its own process, all at once (a daemon at the
examples' 5 s intervals costs little). Prints one table: pages, updates, fixed notices,
resolved messages, the first resolved message's arrival after the server served again,
silent incidents and false resolves (tests/examples_count.py says how each is counted),
and what is wrong where a case breaks the issue's expectation.

    python bench/examples_e2e.py [--scale 1] [--only gpu-fleet/refused ...] [--keep]

--scale N divides the clocks as tests/test_e2e_examples.py does (a quick look).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from examples_cases import NA, SCENARIOS  # noqa: E402
from examples_config import EXAMPLES  # noqa: E402
from examples_run import Result, run_case  # noqa: E402

from sentinel.config.model import DEFAULT_INTERVAL_MS  # noqa: E402
from sentinel.demo.tally import table  # noqa: E402


def _one(args: tuple[str, str, str, int]) -> Result | str:
    example, scenario, folder, scale = args
    logging.basicConfig(level=logging.CRITICAL)
    evaluation_s = DEFAULT_INTERVAL_MS / 1000 if scale == 1 else 1.0
    try:
        return run_case(example, scenario, Path(folder), scale, evaluation_s=evaluation_s,
                        warm_up_s=30.0 / scale, slack_s=max(60.0 / scale, 10.0))
    except Exception as exc:  # noqa: BLE001 - one broken case is a row, not the end
        return f"{example}/{scenario}: {type(exc).__name__}: {exc}"


def _row(r: Result, scale: int, evaluation_s: float) -> tuple[object, ...]:
    told = r.told
    after = r.resolved_after_s
    return (r.example, r.scenario, told.pages, told.updates, told.notices, len(told.resolved),
            "-" if after is None else f"{after * scale:+.1f}s", r.silent, r.false_resolves,
            "; ".join(r.problems(scale, evaluation_s)) or "ok")


def main() -> None:
    """Run the chosen cases at once and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=int, default=1, help="divide the clocks (1: real time)")
    p.add_argument("--only", nargs="*", default=None, help="EXAMPLE/SCENARIO cases to run")
    p.add_argument("--keep", action="store_true", help="keep the working folder")
    args = p.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="snt-ex-"))  # short: unix sockets live there
    cases = [(e, s) for e in EXAMPLES for s in SCENARIOS
             if args.only is None or f"{e}/{s}" in args.only]
    runnable = [(e, s, str(folder / f"{e}-{s}"), args.scale) for e, s in cases
                if (e, s) not in NA]
    print(f"examples_e2e: {len(runnable)} cases at once, scale {args.scale}, folder {folder}",
          flush=True)
    started = time.monotonic()
    try:
        with ProcessPoolExecutor(max_workers=len(runnable)) as pool:
            results = list(pool.map(_one, runnable))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    evaluation_s = DEFAULT_INTERVAL_MS / 1000 if args.scale == 1 else 1.0
    rows: list[tuple[object, ...]] = []
    for e, s in cases:
        if (e, s) in NA:
            rows.append((e, s, "-", "-", "-", "-", "-", "-", "-", f"n/a: {NA[(e, s)]}"))
    for r in results:
        if isinstance(r, str):
            rows.append((*r.split(":", 1)[0].split("/"), *["?"] * 7, r))
        else:
            rows.append(_row(r, args.scale, evaluation_s))
    order = {c: i for i, c in enumerate(cases)}
    rows.sort(key=lambda row: order.get((str(row[0]), str(row[1])), 99))
    print()
    print(table(("example", "scenario", "pages", "updates", "notices", "resolved",
                 "resolved after serving", "silent", "false resolves", "verdict"), rows))
    print(f"\n(seconds in production time; wall {time.monotonic() - started:.0f}s)")


if __name__ == "__main__":
    main()
