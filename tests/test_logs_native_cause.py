"""A native death printed before its cause is one event, named by the cause (issue 51).

A runtime's abort or fatal signal is how a process ends after its cause,
and the two reach the log in either order (llama.cpp's Metal backend can
print its assert before the command buffer's out-of-memory status; threads
interleave). A cause that follows a native death within the native crash's
window joins its event and names it; one further away is a crash of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.logs import Classifier, SignatureSet, load_signature_file
from sentinel.model import LogEntry, LogEvent

ROOT = Path(__file__).resolve().parent.parent
ABORT = "/src/ggml/src/ggml-metal/ggml-metal-context.m:241: fatal error"
OOM = "error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)"


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(ROOT / "rules" / "signatures.yaml")


def _run(sigs: SignatureSet, lines: list[str]) -> list[LogEvent]:
    c = Classifier(sigs)
    out = c.feed_many([LogEntry("t", "s", 1_000 + i, line, i + 1) for i, line in enumerate(lines)])
    return out + c.flush()


def test_a_cause_after_the_abort_names_the_one_event(sigs: SignatureSet) -> None:
    events = _run(sigs, [ABORT, "ggml_metal_graph_compute: command buffer 0 failed with status 5",
                         OOM, "Aborted (core dumped)"])
    assert [(e.category, e.signature) for e in events] == [("cuda_oom", "cuda_oom")]
    assert events[0].excerpt[0] == ABORT  # the abort's line is in the one excerpt


def test_a_cause_past_the_abort_s_window_is_a_crash_of_its_own(sigs: SignatureSet) -> None:
    quiet = [f"INFO restarting, step {i}" for i in range(12)]
    events = _run(sigs, [ABORT, *quiet, OOM])
    assert [e.signature for e in events] == ["native_crash", "cuda_oom"]


def test_a_symptom_after_the_abort_still_joins_it(sigs: SignatureSet) -> None:
    events = _run(sigs, ["Fatal Python error: Segmentation fault",
                         "ERROR 12-07 10:00:00 [core.py:1] EngineCore encountered a fatal error.",
                         "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
                         "issue. See stack trace (above) for the root cause."])
    assert [e.signature for e in events] == ["native_crash"]


def test_an_ascend_runtime_record_waits_for_the_collective_that_caused_it(
        sigs: SignatureSet) -> None:
    """torch_npu's ACL failure is printed for any failure on the device, a collective's too:
    a symptom, joined by the HCCL failure after it (one event, named by the collective)."""
    events = _run(sigs, [
        "[ERROR] 2025-09-03-03:02:37 (PID:7226, Device:1, RankID:-1) ERR00100 PTA call acl "
        "api failed",
        "RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:148 "
        "HCCL function error: hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, "
        "&(comm->hcclComm_)), error code is 11"])
    assert [(e.category, e.signature) for e in events] == [
        ("interconnect_failure", "collective_failure")]


def test_an_ascend_runtime_record_alone_is_an_npu_runtime_error(sigs: SignatureSet) -> None:
    events = _run(sigs, ["[PID: 91798] 2025-11-29-10:54:13.230.208 "
                         "AclNN_Runtime_Error(EZ9903): rtKernelLaunchWithHandleV2 failed: 507014"])
    assert [(e.category, e.signature) for e in events] == [("other", "npu_runtime_error")]
