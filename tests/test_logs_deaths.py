"""Structural evidence of a death (issue 51): one event per death, whatever the server said.

Real formats: the kernel's fault lines and OOM report (dmesg / `journalctl -k`),
a journald export (`journalctl -o json -u vllm.service`) with systemd's unit
results and systemd-coredump's record, `docker events` lines and a pod's
container statuses (`deaths.docker_event_line`, `deaths.pod_termination_lines`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sentinel.collect.logparse import parse_journal_json
from sentinel.logs import Classifier, SignatureSet, load_signature_file
from sentinel.logs.deaths import docker_event_line, is_record, pod_termination_lines
from sentinel.model import LogEntry, LogEvent

ROOT = Path(__file__).resolve().parent.parent

SERVING = [f"INFO 12-07 10:00:{i:02d} [loggers.py:123] Engine 000: Avg prompt throughput: "
           f"{i}.0 tokens/s, Running: 1 reqs" for i in range(40)]


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(ROOT / "rules" / "signatures.yaml")


def run(sigs: SignatureSet, lines: list[tuple[int, str]] | list[str],
        batch: int = 5) -> list[LogEvent]:
    """Classify (time ms, line) pairs (or lines, 1 ms apart) in batches, then end the stream."""
    timed = [(1_000 + i, x) if isinstance(x, str) else x for i, x in enumerate(lines)]
    es = [LogEntry("gpu-a", "journal:vllm.service", t, text, i + 1)
          for i, (t, text) in enumerate(timed)]
    c = Classifier(sigs)
    out: list[LogEvent] = []
    for i in range(0, len(es), batch):
        out += c.feed_many(es[i:i + batch])
    return out + c.flush()


# -- the kernel --------------------------------------------------------------------

SEGFAULT = ("[1234567.890123] python3[4242]: segfault at 0 ip 00007f2a1c3d4e5f sp "
            "00007ffd2b3c4d50 error 4 in libtorch_cuda.so[7f2a10000000+2a000000] likely on "
            "CPU 7 (core 7, socket 0)")
GPF = ("[1234567.890123] traps: VLLM::EngineCor[4242] general protection fault "
       "ip:7f2a1c3d4e5f sp:7ffd2b3c4d50 error:0 in libc.so.6[7f2a1c200000+195000]")
TRAP = ("kernel: traps: python3[4242] trap invalid opcode ip:7f2a1c3d4e5f sp:7ffd2b3c4d50 "
        "error:0 in libggml-cpu.so[7f2a1c200000+95000]")
# The OOM killer's report: header, Mem-Info, the task table, the kill.
OOM_REPORT = [
    "[ 4018.441201] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|"
    "__GFP_COMP), order=0, oom_score_adj=0",
    "[ 4018.441215] CPU: 3 PID: 4242 Comm: python3 Not tainted 6.8.0-49-generic #49-Ubuntu",
    "[ 4018.441290] Mem-Info:",
    "[ 4018.441295] active_anon:15370088 inactive_anon:2 isolated_anon:0",
    "[ 4018.441320] Tasks state (memory values in pages):",
    "[ 4018.441321] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents "
    "oom_score_adj name",
    *[f"[ 4018.4413{30 + i}] [{4200 + i:>7}]     0 {4200 + i:>5}   12345    6789   "
      f"98304        0             0 python3" for i in range(20)],
    "[ 4018.441400] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,"
    "global_oom,task_memcg=/system.slice/vllm.service,task=python3,pid=4242,uid=0",
    "[ 4018.441450] Out of memory: Killed process 4242 (python3) total-vm:26184840kB, "
    "anon-rss:15370088kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:40000kB oom_score_adj:0",
    "[ 4018.512000] oom_reaper: reaped process 4242 (python3), now anon-rss:0kB, file-rss:0kB",
]
XID = ("[ 9381.123456] NVRM: Xid (PCI:0000:9b:00): 79, pid=4242, name=python3, "
       "GPU has fallen off the bus.")
AMDGPU = ["[ 812.000100] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, "
          "signaled seq=1234, emitted seq=1236",
          "[ 812.000200] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* Process information: "
          "process python3 pid 4242 thread python3 pid 4242",
          "[ 812.000300] amdgpu 0000:03:00.0: amdgpu: GPU reset begin!"]


@pytest.mark.parametrize(("lines", "signature"), [
    ([SEGFAULT], "native_crash"), ([GPF], "native_crash"), ([TRAP], "native_crash"),
    (OOM_REPORT, "kernel_oom_kill"), ([XID], "gpu_hardware_fault"),
    (AMDGPU, "gpu_hardware_fault"),
], ids=["segfault", "gpf", "trap", "oom-report", "xid", "amdgpu-ring"])
def test_each_kernel_record_of_a_death_is_one_event_with_the_lines_before_it(
        sigs: SignatureSet, lines: list[str], signature: str) -> None:
    events = run(sigs, SERVING + lines + SERVING[:3])
    assert [e.signature for e in events] == [signature]
    assert events[0].excerpt[0] != lines[0]  # the lines before the death are shown


def test_the_oom_task_table_without_its_kill_line_is_still_a_death(sigs: SignatureSet) -> None:
    cut = OOM_REPORT[4:-3]  # the table only: no header, no "Killed process"
    events = run(sigs, SERVING + cut)
    assert [(e.signature, e.category) for e in events] == [("kernel_oom_kill",
                                                            "host_oom_killed")]


def test_two_deaths_far_apart_are_two_events(sigs: SignatureSet) -> None:
    first = [(1_000 + i, x) for i, x in enumerate(SERVING + OOM_REPORT)]
    later = [(200_000 + i, x) for i, x in enumerate(SERVING[:5] + [SEGFAULT])]
    events = run(sigs, first + later)
    assert [e.signature for e in events] == ["kernel_oom_kill", "native_crash"]


# -- journald ----------------------------------------------------------------------

def _journal(seq: int, t_us: int, message: str, **fields: str) -> str:
    record = {"__CURSOR": f"s=6a3f;i={seq:x};b=9c1e;m={t_us:x};t={t_us:x};x={seq:x}",
              "__REALTIME_TIMESTAMP": str(t_us), "__MONOTONIC_TIMESTAMP": str(t_us - 10**12),
              "_BOOT_ID": "9c1e4d", "PRIORITY": "6", "_HOSTNAME": "gpu-a",
              "MESSAGE": message, **fields}
    return json.dumps(record)


def journal_export() -> list[str]:
    """Two deaths of vllm.service: a segfault with its core dump, then an OOM kill.

    As `journalctl -o json -u vllm.service` prints them: the unit's own lines,
    then systemd's (PID 1) records about the unit and systemd-coredump's.
    """
    t = 1_733_565_600_000_000
    unit = {"_SYSTEMD_UNIT": "vllm.service", "SYSLOG_IDENTIFIER": "vllm", "_PID": "4242"}
    pid1 = {"_PID": "1", "SYSLOG_IDENTIFIER": "systemd", "UNIT": "vllm.service"}
    coredump = "\n".join([
        "Process 4242 (python3) of user 0 dumped core.", "",
        "Module libtorch_cuda.so without build-id.",
        "Stack trace of thread 4242:",
        "#0  0x00007f2a1c3d4e5f n/a (libtorch_cuda.so + 0x1d4e5f)",
        "#1  0x00007f2a1c3d5a10 n/a (libtorch_cuda.so + 0x1d5a10)",
        "ELF object binary architecture: AMD x86-64"])
    out = [_journal(i, t + i * 1000, line, **unit) for i, line in enumerate(SERVING)]
    t += 100_000
    out += [
        _journal(100, t, coredump, SYSLOG_IDENTIFIER="systemd-coredump", _PID="5151",
                 COREDUMP_UNIT="vllm.service", COREDUMP_SIGNAL="11", COREDUMP_PID="4242"),
        _journal(101, t + 10, "vllm.service: Main process exited, code=dumped, "
                 "status=11/SEGV", **pid1),
        _journal(102, t + 20, "vllm.service: Failed with result 'core-dump'.", **pid1),
        _journal(103, t + 30, "vllm.service: Consumed 3min 12.345s CPU time.", **pid1),
    ]
    t += 5_000_000
    out += [_journal(104, t, "vllm.service: Scheduled restart job, restart counter is at 1.",
                     **pid1),
            _journal(105, t + 10, "Started vllm.service - vLLM server.", **pid1)]
    t += 60_000_000  # a minute of loading and serving
    out += [_journal(200 + i, t + i * 1000, line, **unit) for i, line in enumerate(SERVING)]
    t += 100_000
    out += [
        _journal(300, t, "vllm.service: A process of this unit has been killed by the OOM "
                 "killer.", **pid1),
        _journal(301, t + 10, "vllm.service: Main process exited, code=killed, status=9/KILL",
                 **pid1),
        _journal(302, t + 20, "vllm.service: Failed with result 'oom-kill'.", **pid1),
    ]
    return out


def test_a_journald_export_gives_one_event_per_death_of_the_unit(sigs: SignatureSet) -> None:
    lines = [(p.t_ms, p.text) for record in journal_export()
             for p in parse_journal_json(record, 0)[0]]
    events = run(sigs, lines)
    assert [(e.signature, e.category) for e in events] == [
        ("native_crash", "other"), ("kernel_oom_kill", "host_oom_killed")]
    core, oom = events
    assert core.t_ms == 1_733_565_600_100  # the coredump record's own time, from journald
    assert any("Avg prompt throughput" in x for x in core.excerpt)  # the lines before it
    assert any("code=dumped" in x for x in core.excerpt)  # systemd's result joined it
    assert any("status=9/KILL" in x for x in oom.excerpt)


def test_a_unit_result_alone_is_a_death(sigs: SignatureSet) -> None:
    lines = SERVING + ["vllm.service: Main process exited, code=killed, status=11/SEGV",
                       "vllm.service: Failed with result 'signal'."]
    events = run(sigs, lines)
    assert [e.signature for e in events] == ["unclassified_crash"]
    assert any("Avg prompt throughput" in x for x in events[0].excerpt[:20])


def test_a_coredump_summary_is_a_native_crash(sigs: SignatureSet) -> None:
    summary = ["           PID: 4242 (python3)", "           UID: 0 (root)",
               "        Signal: 11 (SEGV)", "     Timestamp: Sat 2026-12-05 10:00:01 UTC",
               "  Command Line: python3 -m vllm.entrypoints.openai.api_server",
               "    Executable: /usr/bin/python3.12"]
    events = run(sigs, SERVING + summary)
    assert [e.signature for e in events] == ["native_crash"]


# -- one crash, one event ----------------------------------------------------------

CUDA_CRASH = [
    "ERROR 12-07 10:00:41 [core.py:700] EngineCore encountered a fatal error.",
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 691, in run',
    "    self._process_engine_step()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 79.19 GiB of which 1.02 GiB is free.",
]


def test_a_record_of_the_death_after_its_crash_does_not_open_a_second_event(
        sigs: SignatureSet) -> None:
    die = docker_event_line({
        "Type": "container", "Action": "die", "timeNano": 1_733_565_641_500_000_000,
        "Actor": {"ID": "3f2a" * 16, "Attributes": {
            "exitCode": "1", "image": "vllm/vllm-openai:v0.11.0", "name": "vllm"}}})
    assert die is not None
    quiet = [f"INFO 12-07 10:00:4{i} [launcher.py:80] Shutting down FastAPI HTTP server."
             for i in range(3)]
    events = run(sigs, SERVING + CUDA_CRASH + quiet + [die])
    assert [e.signature for e in events] == ["cuda_oom"]


# -- Docker and Kubernetes, rendered in their CLIs' words ---------------------------

def test_docker_events_render_as_docker_events_prints_them() -> None:
    event = {"status": "die", "id": "0fdb5d0b6fd9" * 5 + "abcd", "from": "alpine",
             "Type": "container", "Action": "die",
             "Actor": {"ID": "0fdb5d0b6fd9" * 5 + "abcd",
                       "Attributes": {"name": "test", "image": "alpine:latest",
                                      "exitCode": "137"}},
             "scope": "local", "time": 1483547741, "timeNano": 1483547741241772953}
    assert docker_event_line(event) == (
        "2017-01-04T16:35:41.241772953Z container die " + "0fdb5d0b6fd9" * 5 + "abcd"
        " (exitCode=137, image=alpine:latest, name=test)")
    assert docker_event_line({**event, "Action": "start", "status": "start"}) is None
    assert is_record(docker_event_line(event) or "")


def test_a_pod_status_that_moved_on_is_one_death_per_container() -> None:
    def pod(restarts: int, finished: str | None, code: int = 137,
            reason: str = "OOMKilled") -> dict[str, object]:
        last = {} if finished is None else {"terminated": {
            "exitCode": code, "reason": reason, "startedAt": "2026-12-05T10:00:00Z",
            "finishedAt": finished, "containerID": "containerd://3f2a"}}
        return {"metadata": {"namespace": "llm", "name": "vllm-0"},
                "status": {"containerStatuses": [
                    {"name": "vllm", "restartCount": restarts, "ready": False,
                     "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                     "lastState": last},
                    {"name": "sidecar", "restartCount": 0, "ready": True,
                     "state": {"running": {}}, "lastState": {}}]}}

    assert pod_termination_lines(None, pod(1, "2026-12-05T10:05:00Z")) == []  # history
    lines = pod_termination_lines(pod(0, None), pod(1, "2026-12-05T10:05:00Z"))
    assert lines == ["pod llm/vllm-0 container vllm: Last State: Terminated, Reason: "
                     "OOMKilled, Exit Code: 137, Started: 2026-12-05T10:00:00Z, Finished: "
                     "2026-12-05T10:05:00Z, Restart Count: 1"]
    same = pod(1, "2026-12-05T10:05:00Z")
    assert pod_termination_lines(same, same) == []
    assert pod_termination_lines(same, pod(2, "2026-12-05T10:06:00Z", 0, "Completed")) == []


def test_at_first_sight_a_death_since_watching_began_is_news() -> None:
    """Issue 53: discovery's first list can come after the daemon said ready; a death
    finished since the daemon began watching is reported, an older one is history."""
    def pod(finished: str) -> dict[str, object]:
        return {"metadata": {"namespace": "llm", "name": "vllm-0"},
                "status": {"containerStatuses": [
                    {"name": "vllm", "restartCount": 1, "lastState": {"terminated": {
                        "exitCode": 137, "reason": "OOMKilled", "finishedAt": finished}}}]}}

    began = datetime(2026, 12, 5, 10, 5, 0, 400_000, tzinfo=UTC).timestamp()
    assert pod_termination_lines(None, pod("2026-12-05T10:04:59Z"), began) == []
    # finishedAt has whole seconds: the second Sentinel began in counts
    assert len(pod_termination_lines(None, pod("2026-12-05T10:05:00Z"), began)) == 1
    assert len(pod_termination_lines(None, pod("2026-12-05T10:06:00Z"), began)) == 1
    assert pod_termination_lines(None, pod("not a time"), began) == []
    assert pod_termination_lines(None, pod("2026-12-05T10:06:00Z")) == []  # no start given


def test_a_rendered_pod_death_is_named_by_its_reason(sigs: SignatureSet) -> None:
    oom = ("pod llm/vllm-0 container vllm: Last State: Terminated, Reason: OOMKilled, Exit "
           "Code: 137, Started: a, Finished: b, Restart Count: 1")
    error = ("pod llm/vllm-0 container vllm: Last State: Terminated, Reason: Error, Exit "
             "Code: 1, Started: a, Finished: b, Restart Count: 2")
    assert [e.category for e in run(sigs, SERVING + [oom])] == ["host_oom_killed"]
    assert [e.signature for e in run(sigs, SERVING + [error])] == ["unclassified_crash"]


def test_a_record_naming_another_cause_is_an_event_of_its_own(sigs: SignatureSet) -> None:
    kill = ("[ 4018.450000] Out of memory: Killed process 4242 (python3) total-vm:26184840kB, "
            "anon-rss:15370088kB, file-rss:0kB, shmem-rss:0kB")
    events = run(sigs, SERVING + CUDA_CRASH + SERVING[:12] + [kill])
    assert [e.category for e in events] == ["cuda_oom", "host_oom_killed"]


# -- the invariant, over random streams ----------------------------------------------

RECORDS = [
    "vllm.service: Main process exited, code=dumped, status=11/SEGV",
    "vllm.service: Failed with result 'core-dump'.",
    "2026-12-07T10:00:41.500000000Z container die " + "3f2a" * 16 + " (exitCode=1, image=v, "
    "name=vllm)",
    "pod llm/vllm-0 container vllm: Last State: Terminated, Reason: Error, Exit Code: 139, "
    "Started: a, Finished: b, Restart Count: 1",
    "Process 4242 (python3) of user 0 dumped core.",
]
CRASHES = {"cuda_oom": CUDA_CRASH, "native_crash": [SEGFAULT], "unclassified_crash": [
    "vllm.service: Main process exited, code=killed, status=6/ABRT"]}


def live(sigs: SignatureSet, lines: list[tuple[int, str]], batch: int) -> list[LogEvent]:
    """As LogWatch feeds a followed stream: polls of up to `batch` lines, and a quiet
    poll (a flush on Sentinel's clock) wherever the stream paused for more than 2 s."""
    c = Classifier(sigs)
    out: list[LogEvent] = []
    pending: list[LogEntry] = []
    for i, (t, text) in enumerate(lines):
        if pending and (len(pending) >= batch or t - pending[-1].t_ms > 2_000):
            out += c.feed_many(pending, now_ms=pending[-1].t_ms)
            if t - pending[-1].t_ms > 2_000:
                out += c.flush(pending[-1].t_ms + 2_000)
            pending = []
        pending.append(LogEntry("gpu-a", "journal:vllm.service", t, text, i + 1))
    return out + c.feed_many(pending) + c.flush()


def test_one_crash_is_one_event_whatever_records_follow_it() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    sigs = load_signature_file(ROOT / "rules" / "signatures.yaml")

    @settings(max_examples=60, deadline=None)
    @given(crash=st.sampled_from(sorted(CRASHES)),
           records=st.lists(st.sampled_from(RECORDS), max_size=5),
           gaps=st.lists(st.integers(0, 16), min_size=6, max_size=6),
           batch=st.integers(1, 9), second=st.booleans())
    def check(crash: str, records: list[str], gaps: list[int], batch: int,
              second: bool) -> None:
        lines: list[tuple[int, str]] = []
        t = 1_000

        def add(texts: list[str], step: int = 1) -> None:
            nonlocal t
            for text in texts:
                lines.append((t, text))
                t += step

        add(SERVING[:10])
        add(CRASHES[crash])
        for record, gap in zip(records, gaps, strict=False):
            add(SERVING[:gap])  # records come a few lines apart, within seconds
            add([record])
        if second:  # the restarted server dies again, a minute later
            t += 60_000
            add(SERVING[:5] + [SEGFAULT] + records[:1])
        events = live(sigs, lines, batch)
        assert len(events) == 1 + second, [e.signature for e in events]

    check()
