"""What probes add to one Sentinel's CPU, measured inside it: its probe jobs off and on in turn.

`bench/probe_ab.py` measures two Sentinels side by side. Its pairs swing by
±5 points: two processes differ in their memory layout and in where the
fleet helper's work lands (the helper runs on their cores, and only the
probed side wakes it for probes). Here one Sentinel, the daemon's `App` in
this process on the fleet bench's config with probes at their default
interval (15 s), runs the whole time; its probe jobs are removed from the
I/O loop or added back (the same jobs, at the same offsets, as at start)
window by window.

- Windows come in blocks of four: off, on, on, off, so a steady drift (the
  store filling up to its retention, the machine) cancels within a block.
  A block's figure is its two on windows against its two off ones; the
  result is the median over blocks, so a burst from a noisy neighbour
  moves one block, not the result.
- Windows sit on the rule groups' 5 s grid: the toggle, 5 s to settle,
  then a multiple of 30 s measured, so every window holds as many runs of
  each periodic job: rule evaluations (5 s), scrapes, every target's probe
  (15 s), housekeeping (30 s). One evaluation or housekeeping run more or
  less swung a window by ±0.02 CPU s/s, as much as the probes.
- A window's CPU is the process's (`time.process_time`), split by thread.

What this leaves out: the probe series stay in the store across windows,
so the rules that read them cost the same in both. That part is measured
apart, without the network: `bench/ruleeval.py` with and without every
target's probe series, one evaluation of every rule; per evaluation
interval (5 s) it is CPU seconds a second, added to each block.

    python bench/probe_toggle.py [--targets 1000] [--window 30] [--blocks 6]
                                 [--rule-runs 2] [--pin]

A block in which the Sentinel missed a scrape, a rule evaluation or a
probe is shown but left out of the median.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleet import FleetProcess, _raise_fd_limit, free_port, pin_plan, sentinel_cmd  # noqa: E402
from bench.pairs import MISSED, SHOWN, interval95  # noqa: E402

WARM_S = 60.0  # start-up, first scrapes, every target probed once, models learnt
PHASES = (False, True, True, False)  # probes on, per window of a block
EVAL_LINE = re.compile(r"one evaluation of all \d+ rules: ([0-9.]+) CPU s")


@dataclass
class Block:
    """Four windows: mean CPU s/s with probes off and on, the same by thread, and whether
    the Sentinel did all its work on time throughout."""

    off: float = 0.0
    on: float = 0.0
    threads_off: dict[str, float] = field(default_factory=dict)
    threads_on: dict[str, float] = field(default_factory=dict)
    whole: bool = True

    def add(self, on: bool, cpu: float, threads: dict[str, float]) -> None:
        """One window's reading (each kind comes twice a block)."""
        if on:
            self.on += cpu / 2
        else:
            self.off += cpu / 2
        into = self.threads_on if on else self.threads_off
        for n, v in threads.items():
            into[n] = into.get(n, 0.0) + v / 2


def missed_total(registry: object) -> float:
    """Work the Sentinel could not do on time, so far (its own counters)."""
    total = 0.0
    for metric in registry.collect():  # type: ignore[attr-defined]
        for s in metric.samples:
            if s.name in MISSED:
                total += s.value
    return total


class ToggledSentinel:
    """The daemon's App in this process, on the fleet bench's config with probes on, whose
    probe jobs can be removed from its I/O loop and added back (same jobs, same offsets)."""

    def __init__(self, ports: list[int]) -> None:
        from sentinel.config import load_config
        from sentinel.daemon import gcpolicy
        from sentinel.daemon.app import App
        from sentinel.daemon.malloc import limit_arenas
        from sentinel.daemon.run import setup_logging

        work = Path(tempfile.mkdtemp(prefix="sentinel-toggle-"))
        sentinel_cmd(work, ports, free_port(), probes=True)
        config = load_config(work / "sentinel.yaml")
        setup_logging("WARNING", config)
        limit_arenas()
        gcpolicy.tune()  # as run_daemon does
        self.step = config.evaluation_interval_ms / 1000
        self.app = App(config)
        self.app.start()
        self.on = True

    def set_probes(self, on: bool) -> None:
        """Add the probe jobs back, or remove them (a probe in flight finishes)."""
        probes, jobs = self.app.probes, self.app.scrape_jobs
        assert probes is not None and jobs is not None
        if on and not self.on:
            probes.schedule(jobs, self.app._now_ms())  # noqa: SLF001
        elif self.on and not on:
            for t in probes.targets:
                jobs.remove("probe", t.name)
        self.on = on

    def measure_until(self, wall: float) -> tuple[float, dict[str, float], float]:
        """CPU s/s of the process from now until `wall`, by thread, and work missed."""
        from sentinel.daemon.threadcpu import thread_cpu_seconds

        registry = self.app.metrics.registry
        m0, c0, th0 = missed_total(registry), time.process_time(), thread_cpu_seconds()
        t0 = time.monotonic()
        _sleep_until(wall)
        dt = time.monotonic() - t0
        cpu = (time.process_time() - c0) / dt
        th1 = thread_cpu_seconds()
        split = {n: (th1.get(n, 0.0) - th0.get(n, 0.0)) / dt for n in SHOWN}
        return cpu, split, missed_total(registry) - m0

    def stop(self) -> None:
        self.app.stop(5.0)


def first_toggle(step: float, after: float) -> float:
    """Half an evaluation interval past a multiple of it: between two evaluations."""
    return (after // step + 1) * step + step / 2


def toggle_blocks(targets: int, window_s: int, blocks: int, pin: bool) -> list[Block]:
    """Run a Sentinel against the fleet, toggling its probe jobs; one Block per four windows
    (each the toggle, one evaluation interval to settle, `window_s` measured)."""
    mine, helpers = pin_plan(pin)
    fleet = FleetProcess(targets, traffic="idle", cpus=helpers)
    if mine is not None:
        os.sched_setaffinity(0, mine)  # before the App's threads start: they inherit it
    try:
        sentinel = ToggledSentinel(fleet.ports)
        try:
            time.sleep(WARM_S)
            out: list[Block] = []
            step = sentinel.step
            start = first_toggle(step, time.time())
            for k in range(blocks * len(PHASES)):
                if k % len(PHASES) == 0:
                    out.append(Block())
                _sleep_until(start)
                sentinel.set_probes(PHASES[k % len(PHASES)])
                _sleep_until(start + step)  # settled: in-flight probes ended
                start += step + window_s
                cpu, split, missed = sentinel.measure_until(start)
                out[-1].add(sentinel.on, cpu, split)
                out[-1].whole &= not missed
                print(f"window {k + 1:2d} probes {'on ' if sentinel.on else 'off'}: "
                      f"{cpu:.4f} CPU s/s ("
                      + ", ".join(f"{n.removeprefix('sentinel-')} {v:.4f}"
                                  for n, v in split.items()) + ")"
                      + (f"  MISSED {missed:g}" if missed else ""), flush=True)
            return out
        finally:
            sentinel.stop()
    finally:
        fleet.stop()


def _sleep_until(wall: float) -> None:
    time.sleep(max(0.0, wall - time.time()))


def rule_passes_s(targets: int, swap: bool) -> dict[bool, float]:
    """One evaluation of every rule without and with the probe series, CPU s (bench/
    ruleeval.py, best of its rounds), both run at once, each on a CPU of its own
    (swapped by `swap`), so the machine's drift hits both; one after the other on one CPU.
    """
    cpus = list(range(os.cpu_count() or 1))[:2]
    if swap:
        cpus.reverse()
    procs, out = {}, {}
    for with_probes in (False, True):
        cmd = [sys.executable, str(Path(__file__).with_name("ruleeval.py")),
               "--targets", str(targets), "--rounds", "5"] + (["--probes"] if with_probes
                                                             else [])
        cpu = cpus[with_probes] if len(cpus) == 2 else None
        pin = None if cpu is None else functools.partial(os.sched_setaffinity, 0, {cpu})
        procs[with_probes] = proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                                     preexec_fn=pin)
        if cpu is None:  # one CPU: one after the other
            out[with_probes] = _eval_s(proc)
    for with_probes, proc in procs.items():
        if with_probes not in out:
            out[with_probes] = _eval_s(proc)
    return out


def _eval_s(proc: subprocess.Popen[str]) -> float:
    text = proc.communicate()[0]
    found = EVAL_LINE.search(text)
    if proc.returncode or found is None:
        raise SystemExit(f"bench/ruleeval.py failed or printed no evaluation time:\n{text}")
    return float(found.group(1))


def rule_part(targets: int, runs: int) -> float:
    """What the probe series add to the rules, CPU s/s: ruleeval with and without them,
    the median of `runs` side-by-side runs (one sequential run each way read +0.002 one
    day and +0.011 the next on this machine; side by side, four runs read -0.001 to
    +0.003)."""
    added = []
    for i in range(runs):
        passes = rule_passes_s(targets, swap=bool(i % 2))
        added.append((passes[True] - passes[False]) / 5.0)  # a pass every 5 s evaluation
        print(f"rules, run {i + 1}: a pass of every rule takes {passes[False]:.3f} s without "
              f"the probe series, {passes[True]:.3f} s with them: {added[-1]:+.4f} CPU s/s",
              flush=True)
    return statistics.median(added)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options both toggling benches take: targets, window, the rules' part."""
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--window", type=int, default=30,
                    help="seconds measured per window, a multiple of 30 (each after the "
                         "toggle and 5 s to settle)")
    ap.add_argument("--rule-runs", type=int, default=2,
                    help="side-by-side bench/ruleeval.py runs for the rules' part (0: leave "
                         "it out)")


def check_window(window_s: int) -> None:
    """Refuse a window that would not hold a whole number of every periodic job's runs."""
    if window_s < 30 or window_s % 30:
        raise SystemExit("--window must be a multiple of 30 s: the housekeeping job's "
                         "interval, and a whole number of evaluations and probe rounds")


def main() -> None:
    """Parse arguments, toggle, measure the rules' part, print what probes add."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--blocks", type=int, default=6, help="blocks of four windows")
    ap.add_argument("--pin", action="store_true",
                    help="run the Sentinel on one CPU and the fleet helper on the others")
    args = ap.parse_args()
    check_window(args.window)
    _raise_fd_limit()
    got = toggle_blocks(args.targets, args.window, args.blocks, args.pin)
    rules = rule_part(args.targets, args.rule_runs) if args.rule_runs else 0.0
    blocks = [b for b in got if b.whole]
    for i, b in enumerate(got):
        print(f"block {i + 1}: probes off {b.off:.4f}, on {b.on:.4f} CPU s/s: "
              f"{100 * (b.on - b.off + rules) / b.off:+.1f} % with the rules' part"
              + ("" if b.whole else "  (left out: work missed)"))
    if not blocks:
        raise SystemExit("every block missed work: use fewer --targets")
    for n in SHOWN:
        print(f"  {n} added, median of blocks: "
              f"{statistics.median(b.threads_on[n] - b.threads_off[n] for b in blocks):+.4f}")
    shares = [(b.on - b.off + rules) / b.off for b in blocks]
    print(f"probes add {100 * statistics.median(shares):+.1f} % to Sentinel's CPU, median of "
          f"{len(blocks)} blocks ({args.targets} idle targets, probes every 15 s, every "
          f"canary sent" + (", pinned" if args.pin else "") + ")")
    print(interval95(shares))


if __name__ == "__main__":
    main()
