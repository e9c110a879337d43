"""What a change does to Sentinel's CPU: this checkout against a git revision, side by side.

One fleet helper (bench/fleet.py) serves two Sentinels at once with the
same config: one runs this checkout's code (uncommitted changes included),
the other the revision given (checked out into a temporary git worktree),
and both are measured over the same window (bench/pairs.py), so the
machine's drift cancels out. Each repeat swaps which one starts first.

    python bench/version_ab.py --against HEAD~1 [--targets 1000] [--seconds 60]
                               [--repeat 3] [--probes] [--traffic idle|busy] [--pin]

Each line prints both CPU figures (s/s) and the change; the last, the
median. A negative change means this checkout is cheaper. Pairs where
either side missed work (scrapes, rule evaluations, probes) or had a probe
fail are marked LEFT OUT and not counted. Both run the rule files and the
fleet helper of this checkout.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleet import ROOT, FleetProcess, _raise_fd_limit, sentinel_cmd  # noqa: E402
from bench.pairs import Side, interval95, run_pairs  # noqa: E402


def worktree(rev: str) -> Path:
    """A detached git worktree of `rev` in a temporary directory."""
    path = Path(tempfile.mkdtemp(prefix="sentinel-rev-")) / "tree"
    res = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q",
                          str(path), rev], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"cannot check out {rev!r}: {res.stderr.strip()}")
    return path


def main() -> None:
    """Parse arguments, check out the revision, start the fleet, measure, print the median."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, metavar="REV",
                    help="the git revision to compare with, e.g. HEAD or HEAD~1")
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=60.0, help="measured window per pair")
    ap.add_argument("--repeat", type=int, default=3, help="pairs to measure")
    ap.add_argument("--probes", action="store_true",
                    help="probes on at their default interval (off by default)")
    ap.add_argument("--traffic", choices=["idle", "busy", "mixed"], default="idle")
    ap.add_argument("--pin", action="store_true",
                    help="run each Sentinel on a CPU of its own (swapped between pairs)")
    args = ap.parse_args()
    _raise_fd_limit()
    tree = worktree(args.against)
    fleet = FleetProcess(args.targets, traffic=args.traffic)
    try:
        def cmd(work: Path, port: int) -> list[str]:
            return sentinel_cmd(work, fleet.ports, port, args.probes)

        # PYTHONPATH ahead of the installed (editable) package: the base imports its own
        # tree; the other side gets this checkout's (bench/pairs.py's default).
        base = Side(args.against, cmd, (("PYTHONPATH", str(tree)),))
        this = Side("this", cmd)
        added = run_pairs(base, this, args.seconds, args.repeat, "change", args.pin)
    finally:
        fleet.stop()
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       capture_output=True)
        shutil.rmtree(tree.parent, ignore_errors=True)
    if not added:
        raise SystemExit("every pair was left out (see above): missed work means this "
                         "machine cannot run two Sentinels and the fleet at once (use "
                         "fewer --targets); failed probes, a fleet helper in trouble")
    print(f"median change {100 * statistics.median(added):+.1f} % over {len(added)} pairs "
          f"({args.targets} targets, probes {'on' if args.probes else 'off'}, "
          f"{args.traffic}, {args.seconds:g} s windows" + (", pinned" if args.pin else "") + ")")
    print(interval95(added))


if __name__ == "__main__":
    main()
