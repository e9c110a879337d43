"""More crash-report shapes, and fatal words that are not a death (issue 51, fourth round).

Shapes that open an event whatever their words: gdb attached to the server
(or opened on its core) with no signal line, LLVM's crash handler, Python's
faulthandler dump whose "Fatal Python error" header was lost among other
lines, a serving wrapper that stops its engine after a failed health check,
HCCL's cluster exception report. Their look-alikes raise nothing: a program
run under gdb, a timeout dump of every thread, a dump at interpreter
shutdown, a health check that is only retried. And a fatal marker needs an
error level or a process that stops: llama.cpp's fit step that "abort"s at
warning level and lets the server go on loading is no death.

The lines are in the formats the public threads quoted in the tuned corpus
show (ggml's crash handler attaching gdb, CANN's HCCL task exception
handler, Xinference's vLLM health check, llama.cpp's common log).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentinel.logs import Classifier, SignatureSet, load_signature_file
from sentinel.model import LogEntry, LogEvent

ROOT = Path(__file__).resolve().parent.parent
SERVING = [f'INFO:     127.0.0.1:5{i:04d} - "POST /v1/completions HTTP/1.1" 200 OK'
           for i in range(3)]
LOADING = ["load_tensors: loading model tensors, this can take a while... (mmap = true)"]


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(ROOT / "rules" / "signatures.yaml")


def run(sigs: SignatureSet, lines: list[str], batch: int = 64) -> list[LogEvent]:
    c = Classifier(sigs)
    entries = [LogEntry("t", "file:x", 1_000 + i, line, i + 1) for i, line in enumerate(lines)]
    out: list[LogEvent] = []
    for i in range(0, len(entries), batch):
        out += c.feed_many(entries[i:i + batch])
    return out + c.flush()


GDB_THREADS = [
    "[New LWP 8409]",
    "[New LWP 8408]",
    "[New LWP 7938]",
    "0x00007fae703158a7 in wait4 () from /usr/lib64/libc.so.6",
    'Thread 2 (Thread 0x7fae5bfff640 (LWP 8409) "llama-server"):',
    "#0  0x00007fae7029e1d9 in ?? () from /usr/lib64/libc.so.6",
    "#1  0x00007fae70fd5e30 in ?? () from /usr/lib64/libggml-base.so",
    '[Inferior 1 (process 7938) detached]',
]
LLVM = [
    "PLEASE submit a bug report to https://github.com/llvm/llvm-project/issues/ and include "
    "the crash backtrace.",
    "Stack dump:",
    "0.\tProgram arguments: /opt/rocm/llvm/bin/clang -cc1 -triple amdgcn-amd-amdhsa",
    " #0 0x00007f5e1c0a3e6e (/opt/rocm/lib/libamd_comgr.so.2+0x2a3e6e)",
]
FAULT = [
    "Thread 0x00007f2b6effd640 (most recent call first):",
    '  File "/usr/lib/python3.12/threading.py", line 355 in wait',
    "[2026-01-10 10:00:00 TP0] Decode batch. #running-req: 4, #token: 812, gen throughput "
    "(token/s): 88.1",
    "Current thread 0x00007f2c8e7fc740 (most recent call first):",
    '  File "/sgl/srt/model_executor/model_runner.py", line 1900 in forward_decode',
    "[2026-01-10 10:00:00 TP1] Decode batch. #running-req: 4, #token: 812",
    "Extension modules: numpy.core._multiarray_umath, torch._C, torch._C._fft (total: 52)",
]
WRAPPER = [
    "2026-01-10 10:00:00,001 xinference.model.llm.vllm.core 1208 INFO     Detecting vLLM "
    "is not health, prepare to quit the process",
]
HCCL = [
    "there are(is) 1 abnormal device(s):",
    "    Cluster Exception Location[IP/ID]:[10.0.0.2/1], Arrival Time:[Fri Jan 10 10:00:00 "
    "2026], Discoverer:[10.0.0.2/0], ExceptionType:[Heartbeat Lost Occurred], Possible "
    "Reason:1. Process has exited, 2. Network Disconnected",
]


@pytest.mark.parametrize(("lines", "category"), [
    (GDB_THREADS, "other"),
    (LLVM, "other"),
    (FAULT, "other"),
    (WRAPPER, "engine_dead"),
    (HCCL, "interconnect_failure"),
], ids=["gdb-threads", "llvm-crash", "faulthandler-interleaved", "wrapper-stops",
        "hccl-cluster"])
def test_each_shape_opens_one_event(sigs: SignatureSet, lines: list[str],
                                    category: str) -> None:
    events = run(sigs, SERVING + lines + SERVING)
    assert [e.category for e in events] == [category]


@pytest.mark.parametrize(("lines", "category"), [
    (GDB_THREADS, "startup_failure"),  # a crash report while loading, as round 3 decided
    (WRAPPER, "startup_failure"),  # a death while loading: the model never came up
    (FAULT, "other"),  # a fault signal keeps its name
])
def test_while_loading(sigs: SignatureSet, lines: list[str], category: str) -> None:
    assert [e.category for e in run(sigs, LOADING + lines)] == [category]


def test_a_fault_dump_with_its_header_is_one_event(sigs: SignatureSet) -> None:
    lines = ["Fatal Python error: Segmentation fault", "", *FAULT]
    events = run(sigs, SERVING + lines + SERVING)
    assert [(e.signature, e.category) for e in events] == [("native_crash", "other")]


FIT = ("common_fit_params: failed to fit params to free device memory: n_gpu_layers already "
       "set by user to 999, abort")


@pytest.mark.parametrize("lines", [
    # a program run under gdb from the start: its threads are "[New Thread 0x... (LWP n)]"
    ["[New Thread 0x7ffff5bff640 (LWP 12346)]", "[New Thread 0x7ffff53fe640 (LWP 12347)]"],
    # faulthandler's timeout dump of every thread: the process goes on
    ["Timeout (0:05:00)!", "Thread 0x00007f2b6effd640 (most recent call first):",
     '  File "/usr/lib/python3.12/threading.py", line 355 in wait',
     "Current thread 0x00007f2c8e7fc740 (most recent call first):",
     '  File "/srv/serve.py", line 10 in loop'],
    # a dump while Python finalizes: the process was exiting anyway
    ["Python runtime state: finalizing (tstate=0x00000000014c29c0)", "",
     "Current thread 0x00007fd701a06740 (most recent call first):", "  <no Python frame>"],
    # a health check failed and is retried
    ["WARNING 01-10 10:00:00 [router.py:40] health check failed for backend-1, retrying in 5s",
     "INFO 01-10 10:00:05 [router.py:41] backend-1 healthy again"],
    # llama.cpp's fit step gives up at warning level, bare and with the common log's prefix
    [FIT, "llama_model_loader: loaded meta data with 30 key-value pairs"],
    [f"0.00.366.780 W {FIT}", "0.00.400.001 I llama_model_loader: loaded meta data"],
    # a warning that says "Aborting" names no death either
    ["WARNING 01-10 10:00:00 [spec_decode.py:1] draft out of memory on device 0, aborting the "
     "speculative step"],
], ids=["run-under-gdb", "timeout-dump", "shutdown-dump", "health-retried", "fit-abort",
        "fit-abort-prefixed", "warning-aborting"])
def test_look_alikes_raise_nothing(sigs: SignatureSet, lines: list[str]) -> None:
    assert run(sigs, SERVING + lines + SERVING) == []


def test_a_real_abort_after_the_fit_warning_still_counts(sigs: SignatureSet) -> None:
    """The warning is no marker; the allocator's refusal and the process's abort are."""
    lines = [f"0.00.366.780 W {FIT}",
             "0.18.542.875 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 97809.00 "
             "MiB on device 0: cudaMalloc failed: out of memory",
             "Aborted (core dumped)"]
    assert [e.category for e in run(sigs, LOADING + lines)] == ["cuda_oom"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["gdb", "llvm", "fault", "wrapper", "hccl", "serving",
                                 "fit"]), max_size=8),
       st.integers(min_value=1, max_value=9))
def test_each_report_is_at_most_one_event_whatever_the_batching(
        sigs: SignatureSet, parts: list[str], batch: int) -> None:
    """Any order of the new reports among healthy lines (and the fit warning): the same
    events whatever the batch size, at most one per report, none without a report."""
    blocks = {"gdb": GDB_THREADS, "llvm": LLVM, "fault": FAULT, "wrapper": WRAPPER,
              "hccl": HCCL, "serving": SERVING, "fit": [FIT]}
    lines = [x for p in parts for x in blocks[p]]
    events = run(sigs, lines, batch)
    assert events == run(sigs, lines, 1)
    reports = sum(p not in ("serving", "fit") for p in parts)
    assert len(events) <= reports
    assert (reports == 0) <= (events == [])


@pytest.mark.parametrize("line", [
    "/app/llama.cpp/ggml/src/ggml-sycl/common.hpp:115: SYCL error",
    "/home/u/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp:5120: Vulkan error",
    "Exception caught at file:/app/llama.cpp/ggml/src/ggml-sycl/ggml-sycl.cpp, line:3164, "
    "func:operator()",
])
def test_ggmls_abort_in_any_backends_words_is_a_native_crash(sigs: SignatureSet,
                                                             line: str) -> None:
    events = run(sigs, SERVING + [line] + SERVING)
    assert [(e.signature, e.category) for e in events] == [("native_crash", "other")]


def test_a_compiler_warning_in_ggmls_tree_is_no_abort(sigs: SignatureSet) -> None:
    line = "/app/llama.cpp/ggml/src/ggml.c:1554:5: warning: unused variable 'n' [-Wunused]"
    assert run(sigs, SERVING + [line] + SERVING) == []


@pytest.mark.parametrize("line", [
    'INFO:     127.0.0.1:40000 - "GET /health HTTP/1.1" 200 OK',
    "llama_model_loader: - kv  10: ggml.file_type u32 = 15",
])
def test_frequent_healthy_lines_stay_outside_the_prefilter(sigs: SignatureSet,
                                                           line: str) -> None:
    """The new shapes' anchors are not words every health probe or loader line carries
    ("health", "ggml"): such lines must not reach the full match (a cost on every line)."""
    assert not sigs.has_anchor(line)
