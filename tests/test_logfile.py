"""LogFileSource: following a file across rotation and truncation, no line lost or read twice."""

from __future__ import annotations

import os
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from sentinel.collect.linesplit import LineSplitter, decode_line
from sentinel.collect.logfile import FilePosition, LogFileSource, MemoryPositionStore

T = 1_700_000_000_000


def write(path: Path, data: str | bytes) -> None:
    with open(path, "ab") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def texts(src: LogFileSource, now_ms: int = T) -> list[str]:
    return [e.text for e in src.poll(now_ms)]


def follow(path: Path, **kw: object) -> LogFileSource:
    """A source that has joined `path` at its end (its first poll), as the daemon's would."""
    src = LogFileSource("t", path, **kw)  # type: ignore[arg-type]
    assert src.poll(T) == []
    return src


def drain(src: LogFileSource) -> list[str]:
    """Poll until three polls in a row bring nothing (reads are bounded per poll)."""
    out: list[str] = []
    empty = 0
    while empty < 3:
        batch = texts(src)
        out += batch
        empty = 0 if batch else empty + 1
    return out


def test_joins_an_existing_file_at_its_end_and_counts_its_lines(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    write(log, "old 1\nold 2\nold 3\npart")
    src = follow(log)
    write(log, "ial\nnew\n")
    entries = src.poll(T + 1)
    assert [(e.text, e.line_no) for e in entries] == [("partial", 4), ("new", 5)]
    e = entries[0]
    assert (e.target, e.source, e.t_ms, e.insert_id) == ("t", f"file:{log}", T + 1, None)
    assert src.health.ok and src.health.last_success_ms == T + 1


def test_attached_before_ready_reads_what_was_written_before_the_first_poll(
        tmp_path: Path) -> None:
    """Issue 53: the daemon attaches each file before it says ready; lines written between
    then and the first poll are read, those from before are not."""
    log = tmp_path / "vllm.log"
    write(log, "old 1\nold 2\n")
    src = LogFileSource("t", log)
    src.attach()
    write(log, "crash 1\ncrash 2\n")  # after "ready", before the first poll
    assert [(e.text, e.line_no) for e in src.poll(T)] == [("crash 1", 3), ("crash 2", 4)]


def test_attached_then_rotated_before_the_first_poll_drains_the_old_file(
        tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    write(log, "old\n")
    src = LogFileSource("t", log)
    src.attach()
    write(log, "late 1\n")
    log.rename(tmp_path / "vllm.log.1")
    write(log, "new 1\n")
    assert drain(src) == ["late 1", "new 1"]


def test_attached_a_missing_file_is_read_from_its_start_when_it_appears(
        tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    src = LogFileSource("t", log)
    src.attach()
    write(log, "first\n")
    assert texts(src) == ["first"]


def test_a_saved_position_wins_over_the_attached_point(tmp_path: Path) -> None:
    """An HA standby attaches at its start; the leader's saved position is newer."""
    log = tmp_path / "vllm.log"
    store = MemoryPositionStore()
    write(log, "a\n")
    src = LogFileSource("t", log, offset_store=store)
    src.attach()
    write(log, "b\nc\n")
    st = os.stat(log)
    store.save(src.position_key, FilePosition(st.st_dev, st.st_ino, 4, 2))  # past "b"
    assert texts(src) == ["c"]


def test_start_at_beginning_reads_everything(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    write(log, "a\nb\n")
    assert texts(LogFileSource("t", log, start_at_end=False)) == ["a", "b"]


def test_missing_file_is_recorded_and_read_from_its_start_when_it_appears(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    src = LogFileSource("t", log)  # start_at_end applies only to a file there at the start
    assert src.poll(T) == []
    assert not src.health.ok and "no such file" in (src.health.last_error or "")
    write(log, "first\nsecond\n")
    assert [(e.text, e.line_no) for e in src.poll(T + 1)] == [("first", 1), ("second", 2)]
    assert src.health.ok and src.health.last_error is None


def test_partial_lines_wait_for_their_newline(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    src = follow(log)
    write(log, "abc")
    assert texts(src) == []
    write(log, "def\nxy")
    assert texts(src) == ["abcdef"]
    write(log, "z\n\n")
    assert texts(src) == ["xyz", ""]


def test_crlf_and_invalid_utf8(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    src = follow(log)
    write(log, b"windows\r\nbad \xff\xfe bytes\nend\r\r\n")
    assert texts(src) == ["windows", "bad \ufffd\ufffd bytes", "end\r"]


def test_rotation_reads_the_old_file_to_its_end_then_the_new_one(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    src = follow(log)
    write(log, "a1\n")
    assert texts(src) == ["a1"]
    write(log, "a2\na3\n")  # written just before rotation, not yet read
    log.rename(tmp_path / "vllm.log.1")
    write(log, "b1\nb2\n")
    entries = src.poll(T)
    assert [(e.text, e.line_no) for e in entries] == [("a2", 2), ("a3", 3), ("b1", 1), ("b2", 2)]


def test_late_writes_to_the_rotated_file_are_read_before_it_is_closed(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    src = follow(log)
    with open(log, "ab", buffering=0) as writer:  # a writer that reopens only after a HUP
        writer.write(b"a1\n")
        log.rename(tmp_path / "vllm.log.1")
        write(log, "b1\n")
        assert texts(src) == ["a1", "b1"]
        writer.write(b"a2 late\nunterminated")
        write(log, "b2\n")
        assert texts(src) == ["a2 late", "b2"]
    # the next poll finds the old file quiet: closed, its unterminated last line handed out
    assert texts(src) == ["unterminated"]
    assert texts(src) == []


def test_rotation_between_the_rename_and_the_new_file(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    src = follow(log)
    write(log, "a1\n")
    log.rename(tmp_path / "vllm.log.1")
    assert texts(src) == ["a1"]
    assert src.health.ok  # still following the old file
    write(log, "b1\n")
    assert texts(src) == ["b1"]


def test_rotated_twice_between_polls(tmp_path: Path) -> None:
    """The open file is read to its end, then the middle file (created and rotated away
    without this source ever opening it: found beside the path), then the newest file."""
    log = tmp_path / "vllm.log"
    log.touch()
    src = follow(log)
    write(log, "a1\n")
    assert texts(src) == ["a1"]
    write(log, "a2\n")
    log.rename(tmp_path / "vllm.log.1")
    write(log, "b1\n")
    (tmp_path / "vllm.log.1").rename(tmp_path / "vllm.log.2")
    log.rename(tmp_path / "vllm.log.1")
    write(log, "c1\n")
    assert texts(src) == ["a2"]  # the middle file is drained first, at the next poll
    assert texts(src) == ["b1", "c1"]


def test_copytruncate_shorter_than_our_offset(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    src = follow(log)
    write(log, "a long first line\nanother long line\n")
    assert len(texts(src)) == 2
    shutil.copyfile(log, tmp_path / "vllm.log.1")
    os.truncate(log, 0)
    write(log, "b1\n")
    assert [(e.text, e.line_no) for e in src.poll(T)] == [("b1", 1)]


def test_copytruncate_then_regrown_past_our_offset(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    src = follow(log)
    write(log, "a1\na2\n")
    assert texts(src) == ["a1", "a2"]
    shutil.copyfile(log, tmp_path / "vllm.log.1")
    os.truncate(log, 0)
    write(log, "b1 is longer than the old content\nb2\n")
    assert texts(src) == ["b1 is longer than the old content", "b2"]


def test_copytruncate_behind_a_writer_without_o_append_skips_the_hole(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    src = follow(log)
    write(log, "a1\n" * 1000)
    assert len(texts(src)) == 1000
    os.truncate(log, 0)
    fd = os.open(log, os.O_WRONLY)
    os.pwrite(fd, b"b1\n", 3000)  # the writer's old offset: 3000 NULs before it
    os.close(fd)
    assert texts(src) == ["b1"]


def test_ten_megabyte_line_is_truncated_with_a_marker(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    src = follow(log, max_line_bytes=65_536)
    write(log, b"x" * (10 * 1024 * 1024) + b"\nafter\n")
    got = drain(src)
    assert len(got) == 2 and got[1] == "after"
    assert got[0].startswith("x" * 65_536)
    assert got[0].endswith(f"[line truncated: {10 * 1024 * 1024} bytes]")
    assert len(got[0]) < 65_536 + 100


def test_a_line_that_never_ends_holds_a_bounded_buffer() -> None:
    lines = LineSplitter(max_line_bytes=1000)
    for _ in range(100):
        assert lines.feed(b"y" * 100_000) == []
    assert len(lines._head) == 1000
    last = lines.flush()
    assert last is not None and last.total_bytes == 10_000_000 and len(last.data) == 1000


def test_binary_junk_never_breaks_the_source(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    src = follow(log, max_line_bytes=4096)
    junk = random.Random(7).randbytes(200_000)
    write(log, junk + b"\nok after junk\n")
    got = drain(src)
    assert got[-1] == "ok after junk"
    assert len(got) == junk.count(b"\n") + 2
    assert all(isinstance(t, str) and len(t) < 4200 for t in got)
    assert src.health.ok


def test_reads_are_bounded_per_poll_and_resume(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    src = follow(log, max_read_bytes=1000)
    lines = [f"line {i:05d}" for i in range(2000)]
    write(log, "".join(line + "\n" for line in lines))
    first = texts(src)
    assert 0 < len(first) <= 1000 // len("line 00000\n")
    rest = drain(src)
    assert first + rest == lines


def test_errors_are_recorded_not_raised(tmp_path: Path) -> None:
    src = LogFileSource("t", tmp_path)  # a directory: opens, but cannot be read
    assert src.poll(T) == []
    assert not src.health.ok and "IsADirectoryError" in (src.health.last_error or "")


def test_restart_resumes_at_the_saved_position(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    write(log, "before\n")
    store = MemoryPositionStore()
    src = follow(log, offset_store=store)
    write(log, "a1\npart")
    assert texts(src) == ["a1"]
    src.close()
    st = os.stat(log)
    expected = FilePosition(st.st_dev, st.st_ino, len("before\na1\n"), 2)
    assert store.load(src.position_key) == expected
    write(log, "ial\na2\n")
    again = LogFileSource("t", log, offset_store=store)
    assert [(e.text, e.line_no) for e in again.poll(T)] == [("partial", 3), ("a2", 4)]


def test_restart_after_rotation_while_stopped_drains_the_old_file(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    store = MemoryPositionStore()
    src = follow(log, offset_store=store)
    write(log, "a1\n")
    assert texts(src) == ["a1"]
    src.close()
    write(log, "a2\n")
    log.rename(tmp_path / "vllm.log.1")
    write(log, "b1\n")
    again = LogFileSource("t", log, offset_store=store)
    assert texts(again) == ["a2", "b1"]


def _logrotate(log: Path, keep: int = 5) -> None:
    """logrotate's default scheme: vllm.log.N -> .N+1, ..., vllm.log -> .1, a new vllm.log."""
    for n in range(keep - 1, 0, -1):
        older = log.with_name(f"{log.name}.{n}")
        if older.exists():
            older.rename(log.with_name(f"{log.name}.{n + 1}"))
    log.rename(log.with_name(f"{log.name}.1"))
    log.touch()


@pytest.mark.parametrize("rotations", [1, 2, 3, 4])
def test_restart_after_several_rotations_while_stopped_reads_every_file_in_order(
        tmp_path: Path, rotations: int) -> None:
    """Issue 51: a file rotated several times while Sentinel was stopped is read from where
    it left off, then each file rotated after it, oldest first, then the new file."""
    log = tmp_path / "vllm.log"
    write(log, "old0\n")
    _logrotate(log)  # a file rotated before the one Sentinel reads: never read again
    store = MemoryPositionStore()
    src = follow(log, offset_store=store)
    write(log, "a1\n")
    assert texts(src) == ["a1"]
    src.close()
    expected = []
    for r in range(rotations):
        line = f"r{r}"
        write(log, f"{line}-x\n{line}-y\n")
        expected += [f"{line}-x", f"{line}-y"]
        _logrotate(log)
    write(log, "new\n")
    again = LogFileSource("t", log, offset_store=store)
    assert drain(again) == [*expected, "new"]


def test_restart_after_truncation_while_stopped(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.touch()
    store = MemoryPositionStore()
    src = follow(log, offset_store=store)
    write(log, "a long line one\n")
    assert texts(src) == ["a long line one"]
    src.close()
    os.truncate(log, 0)
    write(log, "b1\n")
    assert texts(LogFileSource("t", log, offset_store=store)) == ["b1"]


class _Writer:
    """A log writer for the randomized test: numbered lines, rotation, copytruncate."""

    def __init__(self, path: Path, rng: random.Random) -> None:
        self.path, self.rng = path, rng
        self.file_no, self.n, self.rotations = 0, 0, 0
        self.written: list[str] = []
        self.old: Path | None = None  # the file just rotated away, for late writes
        self.late_polls = 0  # polls left before the writer has reopened the path

    def line(self, file_no: int) -> str:
        self.n += 1
        pad = "x" * self.rng.choice([0, 1, 5, 50, 300])
        return f"f{file_no} L{self.n} {pad}"

    def write_lines(self, target: Path | None = None) -> None:
        file_no = self.file_no if target is None else self.file_no - 1
        lines = [self.line(file_no) for _ in range(self.rng.randint(1, 20))]
        data = "".join(line + self.rng.choice(["\n", "\r\n"]) for line in lines).encode()
        cut = self.rng.randint(0, len(data))  # two writes, so a poll may see half a line
        write(target or self.path, data[:cut])
        write(target or self.path, data[cut:])
        self.written += lines

    def rotate(self) -> None:
        self.rotations += 1
        self.old = self.path.with_name(f"{self.path.name}.{self.rotations}")
        self.path.rename(self.old)
        self.late_polls = 2
        self.file_no += 1
        self.path.touch()

    def copytruncate(self) -> None:
        self.rotations += 1
        shutil.copyfile(self.path, self.path.with_name(f"{self.path.name}.{self.rotations}"))
        os.truncate(self.path, 0)
        self.file_no += 1


def test_randomized_writes_rotations_and_truncations_lose_and_repeat_nothing(
    tmp_path: Path,
) -> None:
    """Within what is guaranteed (every file is opened before it rotates away, truncation
    only of lines already read) the lines read are exactly the lines written."""
    rng = random.Random(20240501)
    log = tmp_path / "vllm.log"
    log.touch()
    w = _Writer(log, rng)
    src = follow(log, max_line_bytes=200)
    got: list[str] = []

    def poll() -> None:
        nonlocal got
        got += texts(src)
        w.late_polls -= 1

    for _ in range(800):
        op = rng.choices(["write", "poll", "rotate", "truncate", "late"], [50, 30, 8, 6, 10])[0]
        if op == "write":
            w.write_lines()
        elif op == "poll":
            poll()
        elif op == "rotate":
            poll()  # at most one rotation between polls
            w.rotate()
        elif op == "truncate":
            poll()  # copytruncate loses what was not read yet: read it first
            w.copytruncate()
        elif w.old is not None and w.late_polls > 0:
            # a writer that reopens the path only a while after the rename (postrotate HUP)
            w.write_lines(w.old)
    got += drain(src) + drain(src)
    expected = [line if len(line) <= 200 else line[:200] for line in w.written]
    got = [t.split(" …[line truncated")[0] for t in got]
    assert len(got) == len(expected)
    assert Counter(got) == Counter(expected)
    per_file: dict[str, list[int]] = {}
    for t in got:
        f, n = t.split()[:2]
        per_file.setdefault(f, []).append(int(n[1:]))
    assert all(ns == sorted(ns) for ns in per_file.values())
    assert w.rotations > 20


def test_decode_line_marks_truncation() -> None:
    lines = LineSplitter(max_line_bytes=3)
    (raw,) = lines.feed(b"abcdef\n")
    assert decode_line(raw) == "abc …[line truncated: 6 bytes]"
    assert raw.end_offset == 7
