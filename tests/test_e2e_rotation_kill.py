"""Issue 51: a rotating log file and a Sentinel killed with kill -9: every crash once.

A real `sentinel run` follows a log file that a writer rotates the way
logrotate does (`vllm.log` -> `vllm.log.1` -> `vllm.log.2` ..., a new
`vllm.log`) every few blocks. Sentinel is killed with SIGKILL five times,
sometimes while an event is still being assembled; while it is down the
file is written to and rotated once, twice or three times. 40 crash blocks,
each naming its number: 40 events, each block exactly once. The test waits
on events in the database, never on time (the writer's pace only spreads
the rotations out).
"""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

import pytest
from ha_helpers import Daemon, wait

from sentinel.sim.server import start_sim

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BLOCKS = 40
QUIET = [f"INFO 12-07 10:00:{i:02d} [loggers.py:123] Engine 000: Avg prompt throughput: "
         f"{i}.0 tokens/s, Running: 1 reqs" for i in range(12)]  # more than the context after


def block(n: int) -> str:
    """One crash (a CUDA OOM in the engine core), then quiet lines that end its event."""
    return "\n".join([
        f"ERROR 12-07 10:01:{n % 60:02d} [core.py:700] EngineCore encountered a fatal error.",
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 691, '
        "in run_busy_loop",
        "    self._process_engine_step()",
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (block {n}). "
        "GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free.",
        *QUIET]) + "\n"


def logrotate(log: Path, keep: int = 20) -> None:
    """logrotate's default scheme, without compression."""
    for n in range(keep - 1, 0, -1):
        older = log.with_name(f"{log.name}.{n}")
        if older.exists():
            older.rename(log.with_name(f"{log.name}.{n + 1}"))
    log.rename(log.with_name(f"{log.name}.1"))
    log.touch()


def events(db: Path) -> list[tuple[str, list[int]]]:
    """(signature, the block numbers its excerpt names) per recorded event."""
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as c:
            rows = c.execute("SELECT signature, excerpt FROM log_events ORDER BY id").fetchall()
    except sqlite3.OperationalError:  # not migrated yet
        return []
    return [(sig, [int(n) for n in re.findall(r"\(block (\d+)\)", excerpt)])
            for sig, excerpt in rows]


def test_forty_crashes_across_rotations_and_five_kills_are_forty_events(tmp_path: Path) -> None:
    sim = start_sim()
    log = tmp_path / "vllm.log"
    log.write_text("INFO 12-07 09:59:59 [api_server.py:1] Started server process\n")
    db = tmp_path / "sentinel.db"
    (tmp_path / "rules.yaml").write_text("groups: []\n")
    config = tmp_path / "sentinel.yaml"
    config.write_text(f"""\
database: 'sqlite:///{db}'
listen: 127.0.0.1:0
rule_files: [rules.yaml]
probe_interval: 0s
targets:
  - name: gpu-a
    url: '{sim.url}'
    scrape_interval: 1s
    logs: {{files: ['{log}'], poll_interval: 100ms}}
""")
    d = Daemon(tmp_path, "one", config=config).start()
    written = 0

    def write(n: int, rotate_every: int = 3) -> None:
        nonlocal written
        for _ in range(n):
            with log.open("a") as f:
                f.write(block(written))
            written += 1
            if written % rotate_every == 0:
                logrotate(log)
            time.sleep(0.3)  # spreads rotations over seconds; nothing waits on it

    try:
        wait(lambda: d.metric("sentinel_log_source_up", f'{{source="file:{log}",target="gpu-a"}}')
             == 1, 180, "the log source to join the file", step=0.25)
        # Five kills: after all events are in, and while the last ones may still be open;
        # while down, 2 to 5 blocks and one to three rotations.
        for kill, (running, down, rotations) in enumerate(
                [(6, 2, 1), (5, 3, 2), (6, 2, 3), (5, 4, 2), (4, 3, 1)]):
            write(running)
            want = written - kill % 2  # odd kills: an event may still be being assembled
            wait(lambda n=want: len(events(db)) >= n, 180,  # type: ignore[misc]
                 f"{want} events before kill {kill + 1}", step=0.2)
            d.kill9()
            write(down, rotate_every=10**6)
            for _ in range(rotations):
                logrotate(log)
                with log.open("a") as f:
                    f.write(QUIET[0] + "\n")
            d.start()
        write(BLOCKS - written)
        wait(lambda: len(events(db)) >= BLOCKS, 300, f"{BLOCKS} events", step=0.25)
        # A last, different crash: once its event is in, every line before it was read.
        with log.open("a") as f:
            f.write("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory "
                    "while trying to allocate 7406166528 bytes.\n" + "\n".join(QUIET) + "\n")
        wait(lambda: any(sig == "xla_hbm_oom" for sig, _ in events(db)), 180,
             "the last crash's event", step=0.25)
        got = events(db)
        crashes = [blocks for sig, blocks in got if sig == "cuda_oom"]
        assert len(got) == BLOCKS + 1, got
        assert sorted(b for blocks in crashes for b in blocks) == list(range(BLOCKS)), crashes
        assert all(len(blocks) == 1 for blocks in crashes), crashes
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.kill9()
        sim.stop()
