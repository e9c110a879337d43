"""Accelerators beyond NVIDIA's (issue 51): each family in every vendor's words.

Lines in the wordings of the runtimes themselves: Apple Metal's command
buffer, Intel's Unified Runtime and Level Zero, Vulkan's C++ bindings,
amdgpu's ring watchdog, XLA's older mixed-case status text; and a kernel's
file name that says all-reduce without any collective failing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.logs import Classifier, SignatureSet, load_signature_file
from sentinel.logs.families import family_of
from sentinel.model import LogEntry

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(ROOT / "rules" / "signatures.yaml")


def categories(sigs: SignatureSet, lines: list[str]) -> list[str]:
    c = Classifier(sigs)
    out = c.feed_many([LogEntry("t", "file:x", 1_000 + i, x, i + 1)
                       for i, x in enumerate(lines)])
    return [e.category for e in out + c.flush()]


@pytest.mark.parametrize(("line", "category"), [
    ("error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)",
     "cuda_oom"),
    ("Native API failed. Native API returns: 40 (UR_RESULT_ERROR_OUT_OF_RESOURCES)", "cuda_oom"),
    ("level_zero backend failed with error: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)",
     "cuda_oom"),
    ("srv update_slots: decode() failed: vk::Queue::submit: ErrorDeviceLost", "other"),
    ("kernel: amdgpu 0000:c5:00.0: ring comp_1.2.0 timeout, signaled seq=608714, emitted "
     "seq=608716", "other"),
    ("jaxlib.xla_extension.XlaRuntimeError: Resource exhausted: Out of memory while trying to "
     "allocate 17179869184 bytes.", "hbm_oom"),
    ("XlaRuntimeError: Resource exhausted: Attempting to reserve 6.00G at the bottom of memory. "
     "That was not possible.", "hbm_oom"),
], ids=["metal", "sycl-resources", "level-zero", "vulkan", "amdgpu", "tpu-mixed-case",
        "tpu-reserve"])
def test_each_vendors_wording_names_its_family(sigs: SignatureSet, line: str,
                                               category: str) -> None:
    assert categories(sigs, [line]) == [category]


def test_a_kernels_file_name_is_not_a_collective_failure() -> None:
    where = ""
    assert family_of("RuntimeError: CUDA error: an illegal memory access was encountered "
                     "at csrc/custom_all_reduce.cu:368", where) is None
    collective = family_of("RuntimeError: all_reduce failed: peer closed the connection", where)
    assert collective is not None and collective.name == "collective"
