"""Start-up time of the `sentinel` command: `--help` and `incidents list`, against `python -c pass`.

Each command runs N times (default 10) in a fresh process; the table shows the
median wall time, the median CPU time of the child (user + system, from wait4:
steadier than wall time on a shared machine), the fastest run's wall time, and
the medians as a ratio to `python -c pass` measured in the same run (the peer:
what any Python command costs before it does anything). `incidents list` reads an existing SQLite
file with a few incidents, written once before timing (`db upgrade` and the
tracker, as the daemon would). The `floor` rows show what `incidents list`
cannot avoid: SQLAlchemy's ORM and Sentinel's schema models (imported, then
os._exit as the read-only commands do: the teardown of an interpreter that
loaded SQLAlchemy costs about 0.1 s).

    python bench/cli.py              # 10 runs each
    python bench/cli.py --runs 20

Design target (issue 17): `sentinel --help` and `sentinel incidents list` under 0.3 s.
Runs unattended; exit status 0 (1 with --check when a target command's median wall
time is over the budget).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 0.3


def _sentinel() -> list[str]:
    """The installed console script beside this Python, else `python -m sentinel`."""
    script = Path(sys.executable).parent / "sentinel"
    if script.exists():
        return [str(script)]
    found = shutil.which("sentinel")
    return [found] if found else [sys.executable, "-m", "sentinel"]


def _time_once(cmd: list[str], cwd: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run; raises when the command fails."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"bench/cli.py: {' '.join(cmd)} exited {proc.returncode}:\n{err}")
    return wall, usage.ru_utime + usage.ru_stime


def _measure(cmd: list[str], runs: int, cwd: str,
             env: dict[str, str]) -> tuple[float, float, float]:
    """Median wall, median CPU and fastest wall time of `runs` runs."""
    _time_once(cmd, cwd, env)  # warm the page cache and .pyc files; not counted
    walls, cpus = [], []
    for _ in range(runs):
        w, c = _time_once(cmd, cwd, env)
        walls.append(w)
        cpus.append(c)
    return statistics.median(walls), statistics.median(cpus), min(walls)


def _write_history(url: str) -> None:
    """A database at the current schema holding a few incidents, one resolved."""
    sys.path.insert(0, str(ROOT))
    from sentinel.incidents import Database, IncidentTracker
    from sentinel.model import Alert, AlertState, labels_of

    db = Database(url)
    db.upgrade()
    tracker = IncidentTracker(db)
    t0 = 1_700_000_000_000

    def alert(name: str, target: str, at: int, state: AlertState) -> Alert:
        return Alert(group="vllm", rule=name,
                     labels=labels_of({"alertname": name, "target": target}),
                     annotations=labels_of({"summary": f"{name} on {target}"}),
                     state=state, value=1.0, active_at_ms=at - 60_000, last_eval_ms=at,
                     fired_at_ms=at)

    for i in range(5):
        tracker.process([alert("VLLMRequestsQueued", f"gemma-{i}", t0 + i * 1000,
                               AlertState.FIRING)], t0 + i * 1000)
    db.engine.dispose()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="runs per command (default 10)")
    ap.add_argument("--check", action="store_true",
                    help=f"exit 1 when a target command's median wall time is over {BUDGET_S} s")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="sentinel-bench-cli-") as tmp:
        url = f"sqlite:///{tmp}/sentinel.db"
        _write_history(url)
        # A config whose receivers need secrets that are not set: read-only commands
        # read only its `database` key, so this must work (and not cost a model build).
        config = Path(tmp) / "sentinel.yaml"
        config.write_text(f"database: {url}\nreceivers:\n  - name: pager\n    webhook:\n"
                          "      url: ${BENCH_UNSET_WEBHOOK_URL}\n", encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if k != "BENCH_UNSET_WEBHOOK_URL"}
        sentinel = _sentinel()
        py = sys.executable
        rows = [
            ("peer", "python -c pass", [py, "-c", "pass"]),
            ("target", "sentinel --help", [*sentinel, "--help"]),
            ("target", "sentinel incidents list --database URL",
             [*sentinel, "incidents", "list", "--database", url]),
            ("target", "sentinel incidents list -c sentinel.yaml",
             [*sentinel, "incidents", "list", "-c", str(config)]),
            # What `incidents list` cannot avoid: SQLAlchemy's ORM and the sqlite dialect, then
            # Sentinel's schema models. os._exit as the command does (no interpreter teardown).
            ("floor", "import sqlalchemy.orm + sqlite dialect",
             [py, "-c", "import os, sqlalchemy.orm, sqlalchemy.dialects.sqlite; os._exit(0)"]),
            ("floor", "import sentinel.incidents.queries, render",
             [py, "-c", "import os, sentinel.incidents.queries, sentinel.incidents.render; "
              "os._exit(0)"]),
        ]
        results = []
        for kind, label, cmd in rows:
            wall, cpu, fastest = _measure(cmd, args.runs, tmp, env)
            results.append((kind, label, wall, cpu, fastest))

    peer_wall, peer_cpu = results[0][2], results[0][3]
    print(f"median of {args.runs} runs each; load average {os.getloadavg()[0]:.2f}; "
          f"{os.cpu_count()} cores")
    print(f"{'':7} {'command':48} {'wall ms':>8} {'cpu ms':>8} {'min ms':>8} {'wall/peer':>10} "
          f"{'cpu/peer':>9}")
    over = False
    for kind, label, wall, cpu, fastest in results:
        mark = ""
        if kind == "target":
            mark = "  ok" if wall < BUDGET_S else f"  OVER {BUDGET_S} s"
            over |= wall >= BUDGET_S
        print(f"{kind:7} {label:48} {wall * 1000:8.1f} {cpu * 1000:8.1f} {fastest * 1000:8.1f} "
              f"{wall / peer_wall:9.1f}x {cpu / peer_cpu:8.1f}x{mark}")
    return 1 if (args.check and over) else 0


if __name__ == "__main__":
    raise SystemExit(main())
