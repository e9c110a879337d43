"""A file line's own time (issue 48/51): its stamp where plausible, else the read time."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from sentinel.collect.linestamp import FUTURE_MS, PAST_MS, line_time_ms, stamp_ms
from sentinel.collect.logfile import LogFileSource
from sentinel.logs import Classifier, load_signature_file

ROOT = Path(__file__).resolve().parent.parent
READ = int(datetime(2026, 12, 7, 10, 0, 30, tzinfo=UTC).timestamp() * 1000)
AT = int(datetime(2026, 12, 7, 10, 0, 1, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(("line", "ms"), [
    ("INFO 12-07 10:00:01 [loggers.py:123] Engine 000: Avg prompt throughput", AT),
    ("(EngineCore_DP0 pid=9) ERROR 12-07 10:00:01.250 [core.py:700] EngineCore failed", AT + 250),
    ("2026-12-07T10:00:01.123Z stderr F torch.OutOfMemoryError: CUDA out of memory", AT + 123),
    ("2026-12-07 11:00:01,500+01:00 - root - CRITICAL - boom", AT + 500),
    ("[2026-12-07 10:00:01] worker died", AT),
    ("Dec  7 10:00:01 gpu-a kernel: python3[4242]: segfault at 0 ip 0 sp 0 error 4", AT),
], ids=["vllm", "vllm-process-prefix", "rfc3339", "iso-offset", "bracketed", "syslog"])
def test_each_stamp_is_read(line: str, ms: int) -> None:
    assert stamp_ms(line, READ) == ms
    assert line_time_ms(line, READ) == ms


def test_an_implausible_stamp_or_none_keeps_the_read_time() -> None:
    assert line_time_ms("no stamp here", READ) == READ
    old = datetime.fromtimestamp((READ - PAST_MS - 1000) / 1000, UTC)
    assert line_time_ms(old.strftime("%Y-%m-%dT%H:%M:%SZ x"), READ) == READ
    ahead = datetime.fromtimestamp((READ + FUTURE_MS + 1000) / 1000, UTC)
    assert line_time_ms(ahead.strftime("%Y-%m-%dT%H:%M:%SZ x"), READ) == READ
    assert line_time_ms("INFO 02-30 10:00:01 [x.py:1] not a date", READ) == READ
    # New Year: a December stamp read on 1 January is last year's
    jan = int(datetime(2027, 1, 1, 0, 0, 5, tzinfo=UTC).timestamp() * 1000)
    dec = int(datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp() * 1000)
    assert line_time_ms("INFO 12-31 23:59:59 [x.py:1] y", jan) == dec


def test_a_crash_read_from_a_file_counts_from_its_own_stamp(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    src = LogFileSource("gpu-a", log)
    assert src.poll(READ) == []
    with open(log, "a") as f:
        f.write("INFO 12-07 10:00:00 [loggers.py:123] Engine 000: Avg prompt throughput\n"
                "ERROR 12-07 10:00:01 [core.py:700] torch.OutOfMemoryError: CUDA out of "
                "memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79 GiB\n")
    entries = src.poll(READ)
    c = Classifier(load_signature_file(ROOT / "rules" / "signatures.yaml"))
    (event,) = c.feed_many(entries) + c.flush()
    assert event.signature == "cuda_oom" and event.t_ms == AT  # not READ, 29 s later
