"""Crash reports open an event by their shape, whatever their words (issue 51, third round).

The kernel's oops and panic headers, a debugger's view of a process that
took a fatal signal, a native stack dump (Go's runtime, glibc's checks), an
accelerator runtime's error status at error level and a Python traceback
whose header line was cut each open one event. They are symptom-level: a
cause in the same window names the event, the family layer renames it, and
a report while the server is still loading is a start-up failure. Their
healthy look-alikes (a kernel WARNING with the same Call Trace, a
developer's gdb session, a debug dump of a status, a handled traceback, a
frame list without an exception) raise nothing.

The lines are in the formats the public threads quoted in the corpus show
(dmesg and journalctl -k, gdb attached by ggml's crash handler, Go's
runtime under Ollama, ROCm's rocdevice.cpp callback).
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
LOADING = ["load_tensors: loading model tensors, this can take a while... (mmap = true)",
           "llama_model_load: loading model from /models/m.gguf"]

OOPS = [
    "[ 1747.571494] BUG: kernel NULL pointer dereference, address: 0000000000000008",
    "[ 1747.571497] #PF: supervisor read access in kernel mode",
    "[ 1747.571502] Oops: 0000 [#1] PREEMPT SMP NOPTI",
    "[ 1747.571505] CPU: 4 PID: 10587 Comm: python3 Tainted: G        W  OE     6.8.0-45-generic",
    "[ 1747.571567] RIP: 0010:pm_send_runlist+0x4a/0x6a0 [amdgpu]",
    "[ 1747.571569] Call Trace:",
    "[ 1747.571571]  <TASK>",
    "[ 1747.571575]  kfd_process_dequeue_from_all_devices+0x62/0xa0 [amdgpu]",
]
PANIC = ["kernel: Kernel panic - not syncing: Fatal exception",
         "kernel: Kernel Offset: 0x2a000000 from 0xffffffff81000000"]
GDB_HANDLER = [
    "[New LWP 860485]",
    "[Thread debugging using libthread_db enabled]",
    '0x00007077fc4ea42f in __GI___wait4 (pid=822100, stat_loc=0x0, options=0) at wait4.c:30',
    "#0  0x00007077fc4ea42f in __GI___wait4 (pid=822100, stat_loc=0x0) at wait4.c:30",
    "#1  0x00007077fd4b292b in ggml_print_backtrace () from libggml-base.so.0",
    "#2  0x00007077fd4c5fff in ggml_cuda_error () from libggml-hip.so",
    "[Inferior 1 (process 822100) detached]",
]
GDB_SIGNAL = ['Thread 1 "llama-server" received signal SIGABRT, Aborted.',
              "__pthread_kill_implementation (threadid=<optimized out>) at pthread_kill.c:44"]
GO_DUMP = ["SIGSEGV: segmentation violation",
           "PC=0x7f31e06c0bf5 m=0 sigcode=1 addr=0x18",
           "signal arrived during cgo execution",
           "goroutine 13 gp=0xc000504e00 m=0 mp=0x5631ae294080 [syscall]:"]
HSA = [":0:rocdevice.cpp            :2992: 4026031038 us:  Callback: Queue 0x7d8018200000 "
       "aborting with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent "
       "attempted to access memory beyond the largest legal address. code: 0x29"]
CUT = [
    '  File "/usr/lib/python3.12/site-packages/vllm/v1/core/sched/scheduler.py", line 219, in '
    "schedule",
    "    blocks = self.kv_cache_manager.allocate_slots(request, num_new_tokens)",
    '  File "/usr/lib/python3.12/site-packages/vllm/v1/core/kv_cache_manager.py", line 239, '
    "in allocate_slots",
    "    first, second = self.coordinator.get_blocks(request.request_id)",
    "ValueError: too many values to unpack (expected 2)",
]


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(ROOT / "rules" / "signatures.yaml")


def run(sigs: SignatureSet, lines: list[str], batch: int = 4) -> list[LogEvent]:
    c = Classifier(sigs)
    es = [LogEntry("t", "file:x", 1_000 + i, x, i + 1) for i, x in enumerate(lines)]
    out: list[LogEvent] = []
    for i in range(0, len(es), batch):
        out += c.feed_many(es[i:i + batch])
    return out + c.flush()


@pytest.mark.parametrize(("lines", "signature"), [
    (OOPS, "native_crash_report"),
    (PANIC, "native_crash_report"),
    (GDB_HANDLER, "native_crash_report"),
    (GDB_SIGNAL, "native_crash_report"),
    (GO_DUMP, "native_crash_report"),
    (HSA, "accelerator_status_error"),
    (CUT, "unclassified_crash"),
], ids=["oops", "panic", "gdb-crash-handler", "gdb-signal", "go-runtime", "hsa-status",
        "cut-traceback"])
def test_a_crash_report_opens_one_event_by_its_shape(
        sigs: SignatureSet, lines: list[str], signature: str) -> None:
    events = run(sigs, SERVING + lines)
    assert [(e.signature, e.category) for e in events] == [(signature, "other")]


@pytest.mark.parametrize("lines", [OOPS, GDB_HANDLER, GO_DUMP, HSA],
                         ids=["oops", "gdb", "go-runtime", "hsa-status"])
def test_a_crash_report_while_loading_is_a_start_up_failure(
        sigs: SignatureSet, lines: list[str]) -> None:
    events = run(sigs, LOADING + lines)
    assert [e.category for e in events] == ["startup_failure"]


def test_a_cause_in_the_window_names_the_report(sigs: SignatureSet) -> None:
    """The allocator's refusal printed before the handler's backtrace is the cause."""
    cause = ["ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000.00 MiB on device 0: "
             "cudaMalloc failed: out of memory"]
    events = run(sigs, SERVING + cause + GDB_HANDLER)
    assert [e.category for e in events] == ["cuda_oom"]


def test_a_hip_error_in_graph_capture_is_a_start_up_failure(sigs: SignatureSet) -> None:
    """The process-group watchdog reports a HIP error while the graphs are captured."""
    lines = ["[2025-11-02 10:00:01 TP0] Capture cuda graph begin. This can take up to several "
             "minutes.",
             "[rank0]:[E1102 10:00:09.1 ProcessGroupNCCL.cpp:1900] [PG ID 0 Rank 0] Process "
             "group watchdog thread terminated with exception: HIP error: operation not "
             "permitted when stream is capturing"]
    events = run(sigs, lines)
    assert [e.category for e in events] == ["startup_failure"]


@pytest.mark.parametrize("code", ["EI0006", "EI0002", "EJ0001", "EI9999"])
def test_hccls_own_error_codes_are_the_interconnect(sigs: SignatureSet, code: str) -> None:
    line = (f"[rank1]: {code}: [PID: 1292363] 2025-11-08-18:07:20.444.436 Getting socket "
            "times out. Reason: Remote Rank did not send the data in time.")
    events = run(sigs, SERVING + [line] + SERVING)
    assert [e.category for e in events] == ["interconnect_failure"]


def test_an_exception_inside_the_kernel_compiler_is_a_compile_failure(
        sigs: SignatureSet) -> None:
    lines = ["Traceback (most recent call last):",
             '  File "/venv/lib/python3.12/site-packages/torch/_inductor/graph.py", line 2083, '
             "in compile_to_module",
             "    return self._compile_to_module()",
             '  File "/venv/lib/python3.12/site-packages/torch/_inductor/codecache.py", line 2747, '
             "in load_by_key_path",
             "    mod = _reload_python_module(key, path)",
             "RuntimeError: Failed to find C compiler. Please specify via CC environment variable."]
    events = run(sigs, SERVING + lines)
    assert [e.category for e in events] == ["compile_failure"]


def test_model_failed_to_load_in_either_word_order_is_a_load_failure(
        sigs: SignatureSet) -> None:
    lines = ["Traceback (most recent call last):",
             '  File "/app/server.py", line 10, in main',
             "    load()",
             "RuntimeError: the model failed to load: no backend could read it"]
    events = run(sigs, SERVING + lines)
    assert [e.category for e in events] == ["startup_failure"]


@pytest.mark.parametrize("lines", [
    # the kernel's WARNING: the same Call Trace and RIP, no oops
    ["[ 5012.1] ------------[ cut here ]------------",
     "[ 5012.1] WARNING: CPU: 7 PID: 0 at drivers/gpu/drm/amd/amdgpu/amdgpu_irq.c:620 "
     "amdgpu_irq_put+0x45/0x70 [amdgpu]",
     "[ 5012.1] RIP: 0010:amdgpu_irq_put+0x45/0x70 [amdgpu]",
     "[ 5012.1] Call Trace:",
     "[ 5012.1]  <TASK>",
     "[ 5012.1]  amdgpu_fence_driver_hw_fini+0xd6/0x110 [amdgpu]",
     "[ 5012.1] ---[ end trace 0000000000000000 ]---"],
    # a developer's gdb session: a breakpoint, Ctrl+C, a backtrace of a live process
    ['Thread 1 "llama-server" hit Breakpoint 1, llama_decode (ctx=0x5555) at llama.cpp:100',
     'Thread 1 "llama-server" received signal SIGINT, Interrupt.',
     "#0  0x00007ffff7a9e0ce in __futex_abstimed_wait_common () from libc.so.6",
     "#1  0x0000555555601234 in server_queue::start_loop() ()"],
    # a hung process's backtrace through a signal handler (SIGCHLD), the process alive
    ["#6  0x000000000048d1a5 in ProcWait::proc_key(int) ()",
     "#7  0x000000000048d224 in ProcWait::SIGCHLD_handler(int) ()",
     "#8  <signal handler called>",
     "#9  0x00007fdb3bccaa85 in ?? () from /lib64/libc.so.6"],
    # a status dumped at debug level, a fallback warned about
    ["DEBUG 12-07 10:00:01 [rocm.py:40] hipMemGetInfo returned hipErrorInvalidValue "
     "for the probe; retrying",
     "WARNING 12-07 10:00:02 [xpu.py:12] ZE_RESULT_ERROR_UNSUPPORTED_FEATURE: falling back "
     "to the SYCL path"],
    # frames listed without an exception (a stack sampler, a warning's stack)
    ['  File "/app/server.py", line 10, in main', "    serve()",
     '  File "/app/server.py", line 20, in serve', "    loop.run()"],
    # a handled traceback logged at WARNING, the server carries on
    ["WARNING 12-07 10:00:03 [tool_parser.py:90] Error in extracting tool call",
     "Traceback (most recent call last):",
     '  File "/app/tool_parser.py", line 80, in extract', "    json.loads(text)",
     "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
     "INFO 12-07 10:00:04 [engine.py:300] Added request chatcmpl-8."],
], ids=["kernel-warning", "developer-gdb", "hang-in-signal-handler", "debug-status",
        "frames-only", "handled-traceback"])
def test_healthy_look_alikes_raise_nothing(sigs: SignatureSet, lines: list[str]) -> None:
    assert run(sigs, SERVING + lines + SERVING) == []


def test_a_report_after_its_crash_event_is_that_crash(sigs: SignatureSet) -> None:
    """One crash, one event: the handler's backtrace after ggml's abort opens nothing."""
    lines = ["/src/ggml-cuda.cu:88: ROCm error", "ggml_abort"] + GDB_HANDLER
    assert len(run(sigs, SERVING + lines + SERVING)) == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["oops", "gdb", "go", "hsa", "cut", "serving", "loading"]),
                max_size=8), st.integers(min_value=1, max_value=9))
def test_batching_never_changes_the_answer_and_each_report_is_one_event(
        sigs: SignatureSet, parts: list[str], batch: int) -> None:
    """Any order of reports among healthy lines: the same events whatever the batch size,
    and never more events than reports (a report is at most one event)."""
    blocks = {"oops": OOPS, "gdb": GDB_HANDLER, "go": GO_DUMP, "hsa": HSA, "cut": CUT,
              "serving": SERVING, "loading": LOADING}
    lines = [x for p in parts for x in blocks[p]]
    events = run(sigs, lines, batch)
    assert events == run(sigs, lines, 1)
    reports = sum(p not in ("serving", "loading") for p in parts)
    assert len(events) <= reports
    assert (reports == 0) <= (events == [])


def test_importing_the_compiler_is_not_compiling(sigs: SignatureSet) -> None:
    """A traceback through Inductor's modules at import time is no compile failure."""
    lines = ["Traceback (most recent call last):",
             '  File "/opt/venv/lib/python3.12/site-packages/vllm/env_override.py", line 500, '
             "in <module>",
             "    import torch._inductor.lowering as _lowering",
             '  File "/opt/venv/lib/python3.12/site-packages/torch/_inductor/lowering.py", '
             "line 7896, in <module>",
             "    from . import kernel",
             "ModuleNotFoundError: import of torch._inductor.async_compile halted; None in "
             "sys.modules"]
    events = run(sigs, SERVING + lines)
    assert [e.category for e in events] == ["other"]
