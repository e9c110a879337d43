"""CommandLogSource over real subprocesses: stand-in `docker` / `journalctl` on PATH, no mocks."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sentinel.collect.logcommand import CommandLogSource, docker_logs, journal_logs
from sentinel.collect.logparse import ParsedLine, parse_docker, parse_journal_json, parse_rfc3339_ns
from sentinel.model import LogEntry

pytestmark = pytest.mark.integration

T = 1_700_000_000_000
STANDIN = Path(__file__).with_name("standin_logs.py")


def wait_for(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll `cond` until true; the deadline is generous (a loaded machine starts the stand-in
    tool slowly: 10 s ran out once beside five other workers)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.01)


def poll_until(src: CommandLogSource, n: int, now_ms: int = T) -> list[LogEntry]:
    """Poll (at a fixed time) until `n` entries came."""
    got: list[LogEntry] = []

    def enough() -> bool:
        got.extend(src.poll(now_ms))
        return len(got) >= n

    wait_for(enough)
    return got


class Standin:
    """A stand-in tool on a private PATH, with its spec and a record of its runs."""

    def __init__(self, tmp_path: Path, tool: str, **spec: object) -> None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        exe = bin_dir / tool
        exe.write_text(f"#!{sys.executable}\n" + STANDIN.read_text())
        exe.chmod(0o755)
        self.record = tmp_path / f"{tool}-runs.jsonl"
        spec_path = tmp_path / f"{tool}-spec.json"
        spec_path.write_text(json.dumps({"record": str(self.record), **spec}))
        self.env = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "STANDIN_SPEC": str(spec_path),
        }

    def runs(self) -> list[dict[str, object]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def followed(self) -> int:
        """How many runs printed everything and are now following."""
        done = Path(str(self.record) + ".done")
        return len(done.read_text().splitlines()) if done.exists() else 0


def docker_line(i: int, text: str, stream: str = "out") -> dict[str, str]:
    return {"ts": f"2024-05-01T12:00:0{i}.12345678{i}Z", "stream": stream, "text": text}


def ms(i: int) -> int:
    return 1_714_564_800_000 + i * 1000 + 123


def test_docker_lines_with_timestamps_from_stdout_and_stderr(tmp_path: Path) -> None:
    tool = Standin(
        tmp_path,
        "docker",
        lines=[
            docker_line(1, "INFO Started server process"),
            docker_line(2, "ERROR RESOURCE_EXHAUSTED: Ran out of memory", "err"),
        ],
    )
    src = docker_logs("tpu-a", "vllm", env=tool.env)
    try:
        got = poll_until(src, 2)
        assert {(e.t_ms, e.text) for e in got} == {
            (ms(1), "INFO Started server process"),
            (ms(2), "ERROR RESOURCE_EXHAUSTED: Ran out of memory"),
        }
        assert {(e.target, e.source) for e in got} == {("tpu-a", "docker:vllm")}
        assert tool.runs()[0]["argv"] == [
            "logs", "--follow", "--timestamps", "--since", "0s", "vllm"
        ]  # fmt: skip
        assert src.health.ok and src.health.last_success_ms == T
    finally:
        src.close()


def test_docker_restart_after_exit_resumes_since_the_newest_line_without_repeats(
    tmp_path: Path,
) -> None:
    tool = Standin(
        tmp_path,
        "docker",
        lines=[docker_line(i, f"line {i}") for i in range(1, 6)],
        runs=[{"exit_after": 3, "code": 1, "stderr": "Error response from daemon: gone"}, {}],
    )
    src = docker_logs("t", "vllm", env=tool.env)
    try:
        assert [e.text for e in poll_until(src, 3)] == ["line 1", "line 2", "line 3"]
        wait_for(lambda: src.poll(T) == [] and not src.health.ok)
        error = src.health.last_error or ""
        assert "exited with code 1" in error and "Error response from daemon: gone" in error
        assert src.restarts == 1 and src.pid is None
        assert src.poll(T + 999) == [] and len(tool.runs()) == 1  # backing off
        got = poll_until(src, 2, T + 1000)
        assert [e.text for e in got] == ["line 4", "line 5"]  # line 3 came again: dropped
        assert tool.runs()[1]["argv"][3:5] == ["--since", "2024-05-01T12:00:03.123456783Z"]
        assert src.health.ok
    finally:
        src.close()


def journal_record(i: int, message: object) -> dict[str, object]:
    return {
        "__CURSOR": f"s=abc;i={i}",
        "__REALTIME_TIMESTAMP": str(ms(i) * 1000 + 456),
        "_SYSTEMD_UNIT": "vllm.service",
        "MESSAGE": message,
    }


def test_journal_json_messages_bytes_and_junk(tmp_path: Path) -> None:
    tool = Standin(
        tmp_path,
        "journalctl",
        lines=[
            journal_record(1, "INFO: Application startup complete."),
            journal_record(2, list(b"bad \xff utf-8")),
            journal_record(3, 'Traceback (most recent call last):\n  File "x.py"\n'),
            journal_record(4, None),
            "{not json",
            journal_record(5, "last"),
        ],
    )
    src = journal_logs("t", "vllm.service", env=tool.env)
    try:
        got = poll_until(src, 6)
        assert [(e.t_ms, e.text) for e in got] == [
            (ms(1), "INFO: Application startup complete."),
            (ms(2), "bad \ufffd utf-8"),
            (ms(3), "Traceback (most recent call last):"),
            (ms(3), '  File "x.py"'),
            (T, "{not json"),
            (ms(5), "last"),
        ]
        assert {e.source for e in got} == {"journal:vllm.service"}
        assert src.parse_errors == 1
        assert src.resume_token == "s=abc;i=5"
        argv = tool.runs()[0]["argv"]
        assert argv[-4:] == ["--unit", "vllm.service", "--since", "now"]
    finally:
        src.close()


def test_journal_restart_resumes_after_the_cursor(tmp_path: Path) -> None:
    tool = Standin(
        tmp_path,
        "journalctl",
        lines=[journal_record(i, f"m{i}") for i in range(1, 5)],
        runs=[{"exit_after": 2, "code": 2, "stderr": "Failed to open journal"}, {}],
    )
    src = journal_logs("t", "vllm.service", env=tool.env)
    try:
        assert [e.text for e in poll_until(src, 2)] == ["m1", "m2"]
        wait_for(lambda: src.poll(T) == [] and not src.health.ok)
        assert "exited with code 2: Failed to open journal" in (src.health.last_error or "")
        assert [e.text for e in poll_until(src, 2, T + 1000)] == ["m3", "m4"]
        assert tool.runs()[1]["argv"][-2:] == ["--after-cursor", "s=abc;i=2"]
    finally:
        src.close()


def test_backoff_doubles_while_the_command_keeps_failing(tmp_path: Path) -> None:
    tool = Standin(tmp_path, "docker", lines=[], runs=[{"exit_after": 0, "code": 125}])
    src = docker_logs("t", "vllm", env=tool.env)
    try:
        now = T
        starts = []
        for _ in range(3):
            src.poll(now)
            starts.append(now)
            wait_for(lambda: src.poll(now) == [] and src.pid is None)  # noqa: B023
            now = src._next_start_ms
        assert [b - a for a, b in zip(starts, [*starts[1:], now], strict=True)] == [
            1000, 2000, 4000
        ]  # fmt: skip
        assert len(tool.runs()) == 3 and src.restarts == 3
    finally:
        src.close()


def test_close_kills_a_command_that_ignores_sigterm(tmp_path: Path) -> None:
    tool = Standin(tmp_path, "docker", lines=[docker_line(1, "hello")], ignore_term=True)
    src = docker_logs("t", "vllm", env=tool.env, close_timeout_s=0.2)
    try:
        poll_until(src, 1)
        wait_for(lambda: tool.followed() == 1)
        pid = src.pid
        assert pid is not None and pid == tool.runs()[0]["pid"]
    finally:
        src.close()
    assert src.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped
    assert src.poll(T + 60_000) == [] and src.pid is None  # closed for good: no restart
    assert len(tool.runs()) == 1


def test_a_full_queue_drops_the_oldest_lines_and_counts_them(tmp_path: Path) -> None:
    lines = [docker_line(1, f"n{i}") for i in range(1000)]
    go = tmp_path / "go"
    tool = Standin(tmp_path, "docker", lines=lines, start_when=str(go))
    src = docker_logs("t", "vllm", env=tool.env, max_queue_lines=100)
    try:
        # The tool prints only once told to: a starved machine can otherwise let it print
        # all 1000 lines before this first poll drains the queue (it then gets the newest
        # 100 and the second poll none: seen at load 16, issue 53).
        assert src.poll(T) == []  # starts it
        go.touch()
        wait_for(lambda: src.dropped_lines == 900)
        got = src.poll(T)
        assert [e.text for e in got] == [f"n{i}" for i in range(900, 1000)]
    finally:
        src.close()


def test_a_plain_text_command(tmp_path: Path) -> None:
    code = "import sys; print('one'); print('two\\r'); sys.stdout.buffer.write(b'\\xff\\n')"
    src = CommandLogSource("t", [sys.executable, "-c", code], name="cmd:py")
    try:
        got = poll_until(src, 3)
        assert [(e.t_ms, e.text, e.source) for e in got] == [
            (T, "one", "cmd:py"), (T, "two", "cmd:py"), (T, "\ufffd", "cmd:py")
        ]  # fmt: skip
    finally:
        src.close()


def test_a_missing_command_is_recorded_and_retried(tmp_path: Path) -> None:
    src = CommandLogSource("t", [str(tmp_path / "no-such-tool")])
    assert src.poll(T) == []
    assert not src.health.ok and "cannot start" in (src.health.last_error or "")
    assert src.poll(T + 10) == [] and src._next_start_ms == T + 1000
    src.close()


def test_parse_rfc3339_nano_and_offsets() -> None:
    assert parse_rfc3339_ns("1970-01-01T00:00:01.5Z") == 1_500_000_000
    assert parse_rfc3339_ns("1970-01-01T01:00:01.000000001+01:00") == 1_000_000_001
    assert parse_rfc3339_ns("1970-01-01T00:00:01Z") == 1_000_000_000
    assert parse_rfc3339_ns("yesterday") is None
    p = parse_docker("2024-05-01T12:00:01.123456789Z hello world", T)
    assert (p.t_ms, p.text, p.t_ns) == (ms(1), "hello world", ms(1) * 1_000_000 + 456_789)
    assert parse_docker("no prefix here", T) == ParsedLine(T, "no prefix here")


def test_journal_record_edge_cases() -> None:
    assert parse_journal_json("[1, 2]", T)[2] is not None
    lines, cursor, error = parse_journal_json(json.dumps({"MESSAGE": [300]}), T)
    assert (lines, cursor, error) == ([], None, None)  # not bytes: no message, no crash
    lines, _, _ = parse_journal_json(json.dumps({"MESSAGE": "x", "__REALTIME_TIMESTAMP": "?"}), T)
    assert lines == [ParsedLine(T, "x")]


def test_close_also_stops_what_the_command_started(tmp_path: Path) -> None:
    # A wrapper whose child keeps the pipes open after the wrapper itself is gone.
    code = (
        "import subprocess, sys; "
        "p = subprocess.Popen([sys.executable, '-c', "
        "'import os, time; print(os.getpid(), flush=True); time.sleep(3600)']); "
        "p.wait()"
    )
    src = CommandLogSource("t", [sys.executable, "-c", code], close_timeout_s=0.2)
    try:
        (line,) = poll_until(src, 1)
        grandchild = int(line.text)
    finally:
        src.close()
    wait_for(lambda: not alive(grandchild))


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting for an init that may never reap it."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status
