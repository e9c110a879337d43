"""Phase and cause over symptom, issue 51's fourth round.

A death before the first request was served is a start-up failure whatever
the symptom says (a runner's exit status, an uncaught C++ exception, a kill,
an exception during the warm-up), and "before" includes the model's
download and warm-up. A native fault or device fault keeps its own name.
Across the window, device memory refused before a compile failure or a
fault names the event (`cuda_oom`), and a runtime's failed stream call
before an engine's death names it (`other`, the accelerator's status).
Each rule has its look-alike: the same death after the server answered a
request, memory refused only after the compiler failed, a TPU kernel's
scratch memory.

The lines are in the formats of the public threads quoted in the tuned
corpus (Ollama's CLI and GIN log, llama.cpp's download and terminate
handler, SGLang's scheduler, torch_npu's records).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentinel.logs import Classifier, SignatureSet, load_signature_file, phase
from sentinel.model import LogEntry, LogEvent

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(ROOT / "rules" / "signatures.yaml")


def events(sigs: SignatureSet, text: str) -> list[LogEvent]:
    c = Classifier(sigs)
    lines = text.strip("\n").split("\n")
    entries = [LogEntry("t", "file:x", 1_000 + i, line, i + 1) for i, line in enumerate(lines)]
    return c.feed_many(entries) + c.flush()


def first(sigs: SignatureSet, text: str) -> str:
    got = events(sigs, text)
    return got[0].category if got else "none"


PULL_CLI = """pulling manifest
pulling 6a0746a1ec1a... 100% ▕████████████████▏ 4.7 GB
verifying sha256 digest
writing manifest
success"""
PULL_GIN = '[GIN] 2026/01/10 - 10:00:00 | 200 |  1m2s |  127.0.0.1 | POST     "/api/pull"'
CHAT_GIN = '[GIN] 2026/01/10 - 10:01:00 | 200 |  3.1s |  127.0.0.1 | POST     "/api/chat"'
RUNNER_EXIT = "Error: llama runner process has terminated: exit status 2"


@pytest.mark.parametrize(("before", "category"), [
    (PULL_CLI, "startup_failure"),  # `ollama run` loads the model right after its pull
    (PULL_GIN, "none-loading"),  # a pull answered says nothing about the model
    (f"{PULL_GIN}\n{CHAT_GIN}", "engine_dead"),  # a chat answered: the model was served
])
def test_a_runner_exit_after_a_pull_is_a_start_up_failure(
        sigs: SignatureSet, before: str, category: str) -> None:
    got = first(sigs, f"{before}\n{RUNNER_EXIT}")
    if category == "none-loading":  # no marker says "loading" either: the death stays
        assert got == "engine_dead"
        assert not phase.loading(before.split("\n"))
    else:
        assert got == category


def test_a_management_request_answered_is_not_serving() -> None:
    loading = "llm_load_tensors: offloaded 33/33 layers to GPU"
    assert phase.loading([loading, PULL_GIN])
    assert not phase.loading([loading, CHAT_GIN])


TERMINATE = """terminate called after throwing an instance of 'std::runtime_error'
  what():  error from HF API, response code: 500, data: Internal Server Error"""


@pytest.mark.parametrize(("before", "category"), [
    ("common_download_file_single: downloading from https://huggingface.co/org/m-GGUF/resolve/"
     "main/m-Q4_K_M.gguf", "startup_failure"),
    ('srv  log_server_r: request: POST /completion 127.0.0.1 200', "other"),
])
def test_an_uncaught_exception_while_loading_is_a_start_up_failure(
        sigs: SignatureSet, before: str, category: str) -> None:
    assert first(sigs, f"{before}\n{TERMINATE}") == category


@pytest.mark.parametrize(("before", "category"), [
    ("[2026-01-10 10:00:00] Load weight begin. avail mem=60.12 GB", "startup_failure"),
    ('INFO:     127.0.0.1:40000 - "POST /generate HTTP/1.1" 200 OK', "other"),
])
def test_a_process_killed_at_launch_is_a_start_up_failure(
        sigs: SignatureSet, before: str, category: str) -> None:
    text = f"{before}\nProcess SpawnProcess-1 exited unexpectedly, exitcode=-9"
    assert first(sigs, text) == category


SCHEDULER_DIES = "\n".join([
    "[2026-01-10 10:00:09] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl/srt/managers/scheduler.py", line 2400, in run_scheduler_process',
    "    scheduler.event_loop_normal()",
    '  File "/sgl/srt/managers/scheduler.py", line 700, in event_loop_normal',
    "    result = self.run_batch(batch)",
    "ValueError: unsupported block shape for this kernel",
    "[2026-01-10 10:00:09] Received sigquit from a child process. It usually means the child "
    "failed.",
])
WARMUP = """[2026-01-10 10:00:01] Capture cuda graph end. Time elapsed: 12.01 s.
[2026-01-10 10:00:05] INFO:     Application startup complete.
[2026-01-10 10:00:05] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2026-01-10 10:00:06] Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0"""
READY = """[2026-01-10 10:00:07] The server is fired up and ready to roll!
[2026-01-10 10:00:08] Prefill batch. #new-seq: 1, #new-token: 60, #cached-token: 0"""


@pytest.mark.parametrize(("before", "category"), [
    (WARMUP, "startup_failure"),  # SGLang's own warm-up request: uvicorn and batches first
    (f"{WARMUP}\n{READY}", "other"),  # ready, then a request: an unknown cause, served
])
def test_an_exception_in_the_warm_up_is_a_start_up_failure(
        sigs: SignatureSet, before: str, category: str) -> None:
    assert first(sigs, f"{before}\n{SCHEDULER_DIES}") == category


def test_a_native_fault_while_loading_keeps_its_name(sigs: SignatureSet) -> None:
    """A fault signal is a cause of its own (the corpus labels ggml's abort so)."""
    text = ("llama_model_load: loading model from /models/m.gguf\n"
            "Fatal Python error: Segmentation fault")
    assert first(sigs, text) == "other"


@pytest.mark.parametrize(("text", "category"), [
    # a backend compiler that fails for lack of device memory: the memory is the cause
    ("RuntimeError: Kernel compilation failed: lack of device memory (requested 3.1 GiB)",
     "cuda_oom"),
    # Metal refusing a command buffer, then the runtime's abort
    ("[METAL] Command buffer execution failed: Insufficient Memory "
     "(00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)\n"
     "libc++abi: terminating due to uncaught exception of type std::runtime_error",
     "cuda_oom"),
    # memory refused only after the compiler failed: the compile failure's fallout
    ("ggml_metal_library_init: error: Error Domain=MTLLibraryErrorDomain Code=3\n"
     "ggml_backend_metal_device_init: error: failed to allocate context", "compile_failure"),
    # a TPU kernel's on-chip scratch memory that does not fit: the compiler's limit
    ("RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent "
     "error. Ran out of memory in memory space vmem.", "compile_failure"),
])
def test_device_memory_before_the_symptom_names_it(
        sigs: SignatureSet, text: str, category: str) -> None:
    assert first(sigs, text) == category


ACL_THEN_DEAD = "\n".join([
    "RuntimeError: operator():build/CMakeFiles/torch_npu.dir/compiler_depend.ts:25 NPU function "
    "error: c10_npu::acl::AclrtSynchronizeStreamWithTimeout(copy_stream), error code is 507035",
    "[ERROR] 2026-01-10-10:00:00 (PID:77, Device:0, RankID:-1) ERR00100 PTA call acl api failed",
    "(APIServer pid=1) ERROR 01-10 10:00:01 [async_llm.py:480] AsyncLLM output_handler failed.",
    "(APIServer pid=1) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
])


def test_a_stream_failure_before_the_engine_death_names_it(sigs: SignatureSet) -> None:
    got = events(sigs, ACL_THEN_DEAD)
    assert [e.category for e in got] == ["other"]
    assert got[0].signature == "accelerator_status_error"


def test_torch_npus_error_record_is_a_runtime_record(sigs: SignatureSet) -> None:
    """The record's shape, whatever its code; while loading, a start-up failure."""
    record = ("[ERROR] 2026-01-10-10:00:00 (PID:1, Device:-1, RankID:-1) ERR99999 UNKNOWN "
              "applicaiton exception")
    assert [e.signature for e in events(sigs, record)] == ["npu_runtime_error"]
    loading = "(EngineCore pid=96) INFO 01-10 10:00:00 [model_runner.py:1] Loading model weights"
    assert first(sigs, f"{loading}\n{record}") == "startup_failure"


def test_a_traceback_inside_one_log_record_is_followed() -> None:
    """SGLang logs the message and its traceback as one record: the frames have no prefix."""
    from sentinel.logs.tracebacks import TracebackTracker
    t = TracebackTracker.start("[2026-01-10 10:00:09 TP0] Scheduler hit an exception: "
                               "Traceback (most recent call last):")
    assert t.accepts('  File "/s/scheduler.py", line 1, in event_loop_normal')
    assert t.accepts("    self.run_batch(batch)")
    assert t.accepts("ValueError: unsupported block shape") and t.after_exception
    assert not t.accepts("[2026-01-10 10:00:09] Received sigquit from a child process.")
    # a prefixed record's traceback still needs its prefix on every line
    v = TracebackTracker.start("(EngineCore pid=1) ERROR 01-10 10:00:00 [core.py:1] "
                               "Traceback (most recent call last):")
    assert not v.accepts('  File "/s/core.py", line 1, in run')


_MARKERS = {
    "loading": "llm_load_tensors: offloaded 33/33 layers to GPU",
    "warmup": "common_init_from_params: warming up the model with an empty run",
    "pull": "pulling manifest",
    "ready": "The server is fired up and ready to roll!",
    "answered": CHAT_GIN,
    "uvicorn": "INFO:     Application startup complete.",
    "batch": "[2026-01-10 10:00:06] Prefill batch. #new-seq: 1, #new-token: 6",
    "pulled": PULL_GIN,
    "noise": "INFO 01-10 10:00:00 [metrics.py:1] GPU KV cache usage: 3.1%",
}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(sorted(_MARKERS)), max_size=12))
def test_the_last_strong_marker_decides_the_phase(parts: list[str]) -> None:
    """The last marker decides: uvicorn's start-up lines, batch records and answers that
    do not touch the model are no markers, so they never end a loading phase."""
    got = phase.loading([_MARKERS[p] for p in parts])
    strong = {"loading": True, "warmup": True, "pull": True, "ready": False,
              "answered": False}
    said = [strong[p] for p in parts if p in strong]
    assert got == (said[-1] if said else False)
