"""How long is a starting `sentinel run` killed by SIGHUP (issue 53)?

SIGHUP's default action ends a process; Sentinel holds SIGHUP (queues it) as
soon as its code runs: at the top of the console script's module
(`sentinel/cli/__init__.py`) or of `python -m sentinel`. What is left is the
interpreter's own start-up before that line, which no Python code can close.

Two measurements, for the console script beside this Python (run with this
checkout first on PYTHONPATH) and for `python -m sentinel`:

- **window**: spawn `run`, read /proc/PID/status as fast as possible until its
  SigCgt has SIGHUP: the time from spawn to the handler (N spawns; min, median,
  95th percentile, max);
- **trials**: spawn `run`, send SIGHUP at a random offset in 0-2 s, and see
  whether the process died of it (its exit status is -SIGHUP) or took it (alive,
  SIGHUP caught, nothing pending); deaths are listed by offset.

A trial stops the process (SIGKILL) once the outcome is known: it never needs the
daemon to finish starting. The config is a SQLite database and no targets.

    python bench/sighup.py                  # 20 spawns for the window, 40 trials each
    python bench/sighup.py --window 50 --trials 100

Linux only (/proc). Figures depend on the machine's load: say it with them.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HUP_BIT = 1 << (signal.SIGHUP - 1)


def _commands() -> dict[str, list[str]]:
    script = Path(sys.executable).parent / "sentinel"
    out = {"python -m sentinel": [sys.executable, "-m", "sentinel"]}
    if script.exists():
        out["console script"] = [str(script)]
    return out


def _mask(pid: int, field: str) -> int | None:
    """A signal mask of /proc/PID/status (SigCgt, SigPnd, ShdPnd), or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1], 16)
    return None


def _spawn(argv: list[str], folder: Path) -> subprocess.Popen[bytes]:
    cfg = folder / "sentinel.yaml"
    if not cfg.exists():
        cfg.write_text(f"database: sqlite:///{folder / 's.db'}\nlisten: 127.0.0.1:0\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([*argv, "run", "-c", str(cfg)], cwd=folder, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(30)


def window_ms(argv: list[str], folder: Path) -> float | None:
    """Spawn to SIGHUP handler, in ms (None: the process ended first)."""
    start = time.perf_counter()
    proc = _spawn(argv, folder)
    try:
        while True:
            cgt = _mask(proc.pid, "SigCgt")
            if cgt is None or proc.poll() is not None:
                return None
            if cgt & HUP_BIT:
                return (time.perf_counter() - start) * 1000
    finally:
        _end(proc)


def trial(argv: list[str], folder: Path, offset_s: float) -> bool:
    """Whether a SIGHUP sent `offset_s` after spawn killed the process."""
    proc = _spawn(argv, folder)
    try:
        time.sleep(offset_s)  # the offset is the experiment, not a wait for an event
        proc.send_signal(signal.SIGHUP)
        while True:
            if proc.poll() is not None:
                return proc.returncode == -signal.SIGHUP
            cgt, pnd, shd = (_mask(proc.pid, f) for f in ("SigCgt", "SigPnd", "ShdPnd"))
            if None in (cgt, pnd, shd):
                continue  # exiting: poll() tells how
            assert cgt is not None and pnd is not None and shd is not None
            if cgt & HUP_BIT and not (pnd | shd) & HUP_BIT:
                return False  # caught (or delivered to the handler): it lives
    finally:
        _end(proc)


def main() -> int:
    """Measure and print both tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--window", type=int, default=20, help="spawns timed to the handler")
    parser.add_argument("--trials", type=int, default=40, help="SIGHUPs at random offsets")
    parser.add_argument("--seed", type=int, default=53)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="sighup-") as d:
        folder = Path(d)
        for name, argv in _commands().items():
            times = [t for _ in range(args.window) if (t := window_ms(argv, folder)) is not None]
            times.sort()
            p95 = times[min(len(times) - 1, int(len(times) * 0.95))] if times else float("nan")
            print(f"{name}: spawn to SIGHUP handler over {len(times)} spawns: min "
                  f"{times[0]:.0f} ms, median {statistics.median(times):.0f} ms, p95 "
                  f"{p95:.0f} ms, max {times[-1]:.0f} ms")
            deaths = []
            for _ in range(args.trials):
                offset = rng.uniform(0.0, 2.0)
                if trial(argv, folder, offset):
                    deaths.append(offset)
            shown = ", ".join(f"{o * 1000:.0f} ms" for o in sorted(deaths)) or "none"
            print(f"{name}: {len(deaths)} of {args.trials} SIGHUPs at random 0-2 s offsets "
                  f"killed it (offsets: {shown})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
