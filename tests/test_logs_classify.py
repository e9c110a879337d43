"""The classifier: quiet on healthy logs, one event per crash with its excerpt, robust input."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sentinel.logs import Classifier, SignatureSet, load_signature_file
from sentinel.model import LogEntry, LogEvent

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "logs"


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(ROOT / "rules" / "signatures.yaml")


def entries(lines: list[str], t0: int = 1_000) -> list[LogEntry]:
    return [LogEntry("tpu-a", "file:/var/log/vllm.log", t0 + i, line, i + 1)
            for i, line in enumerate(lines)]


def run_many(sigs: SignatureSet, lines: list[str], batch: int = 7) -> list[LogEvent]:
    c = Classifier(sigs)
    es = entries(lines)
    out: list[LogEvent] = []
    for i in range(0, len(es), batch):
        out += c.feed_many(es[i:i + batch])
    return out + c.flush()


def run_one_by_one(sigs: SignatureSet, lines: list[str]) -> list[LogEvent]:
    c = Classifier(sigs)
    out = [ev for e in entries(lines) for ev in c.feed(e)]
    return out + c.flush()


def fixture(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


@pytest.mark.parametrize("name", ["healthy_tpu.log", "healthy_gpu.log"])
def test_healthy_startup_and_serving_logs_produce_no_events(sigs: SignatureSet, name: str) -> None:
    lines = fixture(name)
    assert run_one_by_one(sigs, lines) == []
    assert run_many(sigs, lines) == []


def test_tpu_hbm_oom_crash_is_one_event_with_the_whole_chain(sigs: SignatureSet) -> None:
    lines = fixture("tpu_hbm_oom.log")
    events = run_many(sigs, lines)
    assert len(events) == 1
    ev = events[0]
    assert (ev.category, ev.signature, ev.severity) == ("hbm_oom", "xla_hbm_oom", "critical")
    assert ev.line_no == 13 and ev.t_ms == 1_000 + 12
    assert (ev.target, ev.source) == ("tpu-a", "file:/var/log/vllm.log")
    excerpt = "\n".join(ev.excerpt)
    # context before, the engine's traceback with XLA's multi-line message, and the
    # API server's EngineDeadError traceback that followed it
    assert ev.excerpt[0] == lines[0]
    assert "Total hbm usage >= 35.05G:" in excerpt
    assert "EngineDeadError" in excerpt
    assert ev.excerpt[-1] == lines[-1]  # 10 lines of context after, the log has 7
    assert "HBM" in ev.runbook


def test_gpu_cuda_oom_outranks_the_engine_death_it_caused(sigs: SignatureSet) -> None:
    events = run_many(sigs, fixture("gpu_cuda_oom.log"))
    assert [(e.category, e.signature, e.line_no) for e in events] == [("cuda_oom", "cuda_oom", 13)]


def test_feed_and_feed_many_agree_on_a_mixed_stream(sigs: SignatureSet) -> None:
    lines = (fixture("healthy_gpu.log") + fixture("gpu_cuda_oom.log")
             + fixture("healthy_tpu.log") + fixture("tpu_hbm_oom.log") + fixture("healthy_tpu.log"))
    one = run_one_by_one(sigs, lines)
    assert [e.signature for e in one] == ["cuda_oom", "xla_hbm_oom"]
    for batch in (1, 5, 64, 10_000):
        assert run_many(sigs, lines, batch) == one


PLAIN_TRACEBACK = """\
INFO 05-14 09:12:01 [launcher.py:28] Available routes are:
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/site-packages/jax/_src/compiler.py", line 266, in backend_compile
    return backend.compile(built_c, compile_options=options)
{ERR}
BufferAssignment OOM Debugging.
BufferAssignment stats:
             parameter allocation:  372.76MiB
--------------------
For simplicity, JAX has removed its internal frames from the traceback of the following exception.

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/app/serve.py", line 10, in <module>
    main()
{ERR}
INFO 05-14 09:12:09 [api_server.py:1] restarting
INFO 05-14 09:12:10 [api_server.py:1] still here
INFO 05-14 09:12:11 [api_server.py:1] still here
INFO 05-14 09:12:12 [api_server.py:1] still here
INFO 05-14 09:12:13 [api_server.py:1] still here
INFO 05-14 09:12:14 [api_server.py:1] still here
INFO 05-14 09:12:15 [api_server.py:1] still here
INFO 05-14 09:12:16 [api_server.py:1] still here
INFO 05-14 09:12:17 [api_server.py:1] still here
INFO 05-14 09:12:18 [api_server.py:1] still here
INFO 05-14 09:12:19 [api_server.py:1] unrelated and after the window
""".replace("{ERR}", "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: "
                     "Out of memory while trying to allocate 4770354232 bytes.")


def test_plain_stderr_chained_traceback_is_one_deduplicated_event(sigs: SignatureSet) -> None:
    lines = PLAIN_TRACEBACK.splitlines()
    events = run_many(sigs, lines)
    assert len(events) == 1
    ev = events[0]
    assert ev.signature == "xla_hbm_oom" and ev.line_no == 5  # the first hit names it
    assert ev.excerpt[0] == lines[0]  # context before
    assert lines[17] in ev.excerpt  # the second (chained) exception line is inside
    assert "BufferAssignment stats:" in ev.excerpt
    assert lines[-1] not in ev.excerpt  # context after is bounded (xla_hbm_oom: 10)
    assert ev.excerpt[-1] == lines[-2]
    assert run_one_by_one(sigs, lines) == events


def test_docker_timestamped_traceback_lines_stay_together(sigs: SignatureSet) -> None:
    lines = [
        "2026-02-14T02:05:12.797123Z Traceback (most recent call last):",
        '2026-02-14T02:05:12.797456Z   File "/app/x.py", line 3, in <module>',
        "2026-02-14T02:05:12.797789Z torch.OutOfMemoryError: CUDA out of memory. Tried to "
        "allocate 1.71 GiB. GPU 0 has a total capacity of 22.30 GiB",
        "2026-02-14T02:05:13.000001Z INFO: shutting down",
    ]
    events = run_many(sigs, lines)
    assert [(e.signature, e.line_no) for e in events] == [("cuda_oom", 3)]
    assert events[0].excerpt[0] == lines[0]


def test_separate_errors_are_separate_events_and_repeats_merge(sigs: SignatureSet) -> None:
    kernel = ("[ 4018.450000] Out of memory: Killed process 935 (python) total-vm:113656kB, "
              "anon-rss:102104kB, file-rss:0kB, shmem-rss:0kB")
    ctx = ("ERROR 07-03 03:19:15 [serving_chat.py:200] ValueError: This model's maximum context "
           "length is 16384 tokens. However, you requested 122946 tokens (112946 in the "
           "messages, 10000 in the completion).")
    lines = [ctx, "INFO ok", ctx, "INFO ok", kernel, kernel, "INFO a", "INFO b", "INFO c",
             "INFO d"]
    events = run_many(sigs, lines)
    assert [(e.signature, e.line_no) for e in events] == [
        ("vllm_context_length_exceeded", 1), ("vllm_context_length_exceeded", 3),
        ("kernel_oom_kill", 5)]
    assert events[2].excerpt.count(kernel) == 2  # the repeat joined the first kill's event


def test_traceback_matching_no_signature_is_not_an_event(sigs: SignatureSet) -> None:
    lines = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
             "KeyError: 'foo'", "INFO ok", "INFO ok", "INFO ok", "INFO ok"]
    assert run_many(sigs, lines) == []


def test_multi_line_entry_from_cloud_logging_is_grouped(sigs: SignatureSet) -> None:
    text = "\n".join(fixture("gpu_cuda_oom.log")[2:13])
    c = Classifier(sigs)
    events = c.feed(LogEntry("t", "cloud-logging", 5, text, None, "id-1")) + c.flush()
    assert [(e.signature, e.line_no, e.t_ms) for e in events] == [("cuda_oom", None, 5)]
    assert len(events[0].excerpt) == 11


def test_huge_traceback_excerpt_is_capped_keeping_head_and_tail(sigs: SignatureSet) -> None:
    frames = [f'  File "/m/{i}.py", line {i}, in f{i}' for i in range(2_000)]
    lines = (["Traceback (most recent call last):"] + frames
             + ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB.", "INFO"])
    events = run_many(sigs, lines, batch=1000)
    assert len(events) == 1
    ex = events[0].excerpt
    assert len(ex) <= 202 and sum(len(x) for x in ex) <= 70_000
    assert ex[0] == lines[0]
    assert any("lines omitted" in x for x in ex)


def test_binary_junk_and_empty_input_are_harmless(sigs: SignatureSet) -> None:
    junk = bytes(range(256)).decode("latin-1") * 40
    lines = ["", junk, "\x00\x01\x02" * 1000, "\ufffd\ufffd not utf-8 \ufffd", ""]
    assert run_many(sigs, lines) == [] and run_one_by_one(sigs, lines) == []
    c = Classifier(sigs)
    assert c.feed_many([]) == [] and c.flush() == []


def test_ten_megabyte_line_is_truncated_recorded_and_fast(sigs: SignatureSet) -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.71 GiB."
    huge = oom + "A" * 10_000_000 + "RESOURCE_EXHAUSTED: Out of memory while trying to allocate"
    c = Classifier(sigs)
    start = time.thread_time()  # this thread's CPU: a busy machine's other work does not count
    events = c.feed_many(entries(["INFO before", huge, "INFO after"])) + c.flush()
    assert time.thread_time() - start < 2.0
    assert c.stats.truncated_lines == 1 and c.stats.lines == 3
    assert [e.signature for e in events] == ["cuda_oom"]  # matched within the kept 64 KiB
    line = events[0].excerpt[1]
    assert len(line) < 70_000
