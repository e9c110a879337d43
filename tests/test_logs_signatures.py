"""Signature file loading, validation errors, and the anchored combined matcher."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from sentinel.logs import CATEGORIES, SignatureFileError, load_signature_file, parse_signatures
from sentinel.logs.anchors import choose_anchors, required_literals
from sentinel.logs.signatures import SignatureSet

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "rules" / "signatures.yaml"

# Real-world lines (from vLLM, tpu-inference, JAX/XLA, PyTorch, NCCL, kernel,
# docker, systemd issue reports), each with the signature it must raise.
REAL_LINES = [
    ("(EngineCore_DP0 pid=412) ERROR 05-14 09:12:07 [core.py:710] jax.errors.JaxRuntimeError: "
     "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. "
     "Used 33.80G of 31.25G hbm. Exceeded hbm capacity by 2.55G.", "xla_hbm_oom"),
    ("RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. "
     "Ran out of memory in memory space hbm. Used 20.44G of 15.75G hbm. Exceeded hbm capacity by "
     "4.70G.", "xla_hbm_oom"),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Attempting to allocate 1.23G. "
     "That was not possible. There are 512.00M free.", "xla_hbm_oom"),
    ("2023-03-23 02:02:25.057202: E tensorflow/compiler/xla/xla_client/xla_util.cc:90]   "
     "OP_REQUIRES failed at tpu_execute_op.cc:266 : RESOURCE_EXHAUSTED: Attempting to reserve "
     "10.51G at the bottom of memory. That was not possible. There are 8.97G free, 0B reserved, "
     "and 8.97G reservable.", "xla_hbm_oom"),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
     "allocate 7406166528 bytes.", "xla_hbm_oom"),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for "
     "2.99GiB (3206250496B) on device ordinal 0", "xla_hbm_oom"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 74.16 GiB. GPU 0 has a total "
     "capacity of 44.40 GiB of which 29.89 GiB is free.", "cuda_oom"),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.63 GiB (GPU 0; 44.56 "
     "GiB total capacity; 27.91 GiB already allocated; 565.31 MiB free)", "cuda_oom"),
    ("(RayWorkerWrapper pid=206994, ip=192.168.10.25) ERROR 03-27 10:29:13 [worker_base.py:620] "
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 6 has a total "
     "capacity of 44.53 GiB of which 448.00 KiB is free.", "cuda_oom"),
    ("[Sun Mar 30 08:24:00 2025] Out of memory: Killed process 7899 (python) "
     "total-vm:26,184,840kB, anon-rss:153,700,88kB, file-rss:0kB, shmem-rss:0kB, UID:0 "
     "pgtables:38964kB oom_score_adj:0", "kernel_oom_kill"),
    ("May 15 23:09:30 ubuntu kernel: [  518.050606] Out of memory: Killed process 15784 (python3) "
     "total-vm:11964kB, anon-rss:4288kB, file-rss:3028kB, shmem-rss:0kB", "kernel_oom_kill"),
    ("[Sun Mar 30 08:24:00 2025] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,"
     "mems_allowed=0,global_oom,task_memcg=/init.scope,task=python,pid=7899,uid=0",
     "kernel_oom_kill"),
    ("Jun 03 10:00:01 tpu-vm systemd[1]: vllm.service: Failed with result 'oom-kill'.",
     "kernel_oom_kill"),
    ("scalellm exited with code 137", "container_oom_killed"),
    ('            "OOMKilled": true,', "container_oom_killed"),
    ("      Reason:       OOMKilled", "container_oom_killed"),
    ("(APIServer pid=92) ERROR 08-15 11:20:19 [serving.py:825] vllm.v1.engine.exceptions."
     "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root "
     "cause.", "vllm_engine_dead"),
    ("ERROR 04-28 02:37:03 [core.py:398] EngineCore encountered a fatal error.",
     "vllm_engine_dead"),
    ("(APIServer pid=1) ERROR 07-28 10:01:02 [core_client.py:564] Engine core proc EngineCore_0 "
     "died unexpectedly, shutting down client.", "vllm_engine_dead"),
    ("ValueError: User-specified max_model_len (131072) is greater than the derived max_model_len "
     "(None=8192 in model's config.json). This may lead to incorrect model outputs or CUDA "
     "errors.", "vllm_max_model_len_too_large"),
    ("ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine.", "vllm_no_kv_cache_memory"),
    ("jax.errors.JaxRuntimeError: UNKNOWN: TPU initialization failed: open(/dev/vfio/0): Device "
     "or resource busy: Device or resource busy; Couldn't open iommu group /dev/vfio/0",
     "tpu_device_busy"),
    ("jaxlib.xla_extension.XlaRuntimeError: ABORTED: The TPU is already in use by process with "
     "pid 1234. Not attempting to load libtpu.so in this process.", "tpu_device_busy"),
    ("(VllmWorker rank=0 pid=225) ERROR 06-17 19:23:59 [multiproc_executor.py:527] ValueError: "
     "Mosaic failed to compile TPU kernel: Not Implemented: The last dim size is not 128 in "
     "original base memref", "tpu_kernel_compile_failed"),
    ("RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. "
     "Ran out of memory in memory space vmem. Used 32.42M of 16.00M vmem. Exceeded vmem capacity "
     "by 16.42M", "tpu_kernel_compile_failed"),
    ("RuntimeError: Bad StatusOr access: INTERNAL: XLA:TPU compile permanent error. Compilation "
     "failure: Aborting compilation early.", "xla_compile_failed"),
    ("openai.BadRequestError: Error code: 400 - {'object': 'error', 'message': \"This model's "
     "maximum context length is 8192 tokens. However, you requested 64 output tokens and your "
     "prompt contains at least 8129 input tokens, for a total of at least 8193 tokens.\"}",
     "vllm_context_length_exceeded"),
    ("ValueError: This model's maximum context length is 16384 tokens. However, you requested "
     "122946 tokens (112946 in the messages, 10000 in the completion).",
     "vllm_context_length_exceeded"),
    ("WARNING 02-16 15:37:32 scheduler.py:947] Input prompt (2501 tokens) is too long and exceeds "
     "limit of 2048", "vllm_context_length_exceeded"),
    ("(VllmWorkerProcess pid=760) ERROR 07-24 08:26:01 multiproc_worker_utils.py:226] "
     "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
     "nccl_error"),
    ("RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
     "nccl_error"),
    ("E0511 18:18:50.796852     915 tpunetd_client.cc:311] Detected failure "
     "SLICE_FAILURE_CHIP_DRIVER_ERROR in session e6c885828b538167; Start failure handling",
     "tpu_interconnect_failure"),
]


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(BUNDLED)


def test_bundled_file_covers_every_category_and_has_the_catch_all(sigs: SignatureSet) -> None:
    categories = {s.category for s in sigs.signatures}
    assert categories == set(CATEGORIES)
    assert all(s.runbook for s in sigs.signatures)
    catch_all = sigs.by_name("unclassified_crash")
    assert catch_all is not None and catch_all.category == "other"
    assert catch_all.priority == min(s.priority for s in sigs.signatures)


@pytest.mark.parametrize(("line", "name"), REAL_LINES)
def test_real_lines_match_their_signature(sigs: SignatureSet, line: str, name: str) -> None:
    assert sigs.has_anchor(line)
    found = sigs.match_line(line)
    assert found is not None and found.name == name
    assert sigs.candidate_lines("healthy\n" + line + "\nhealthy") == [1]


def test_root_cause_outranks_symptom_on_one_line(sigs: SignatureSet) -> None:
    # "compile permanent error" comes first in the line, the HBM OOM is the cause.
    line = REAL_LINES[1][0]
    assert sigs.match_line(line).name == "xla_hbm_oom"  # type: ignore[union-attr]


def test_candidate_lines_agree_with_a_naive_scan(sigs: SignatureSet) -> None:
    rng = random.Random(7)
    pool = ["INFO ok", "", "x" * 300] + [line for line, _ in REAL_LINES]
    lines = [rng.choice(pool) for _ in range(2000)]
    expected = [i for i, line in enumerate(lines) if sigs.has_anchor(line)]
    assert sigs.candidate_lines("\n".join(lines)) == expected


def test_anchors_are_required_literals() -> None:
    literals = required_literals(r"CUDA out of memory\. Tried [0-9]+")
    assert literals == [["CUDA out of memory. Tried "]]
    assert required_literals("abcd|efgh") == [["abcd"], ["efgh"]]
    anchors = choose_anchors(("CUDA out of memory", "Out of memory: Killed"))
    assert len(anchors) == 1 and all(a in "CUDA out of memory" for a in anchors)


BAD = """\
signatures:
  - name: ok_one
    category: hbm_oom
    severity: critical
    patterns: ['Ran out of memory in memory space hbm']
    runbook: fine
  - name: Bad-Name
    category: gpu_melted
    severity: loud
    colour: red
    patterns:
      - 'unbalanced (paren'
      - '[0-9]+'
      - '(?P<mine>named group here)'
    context_after: 500
    runbook: ''
  - name: ok_one
    category: other
    severity: info
    patterns: ['duplicate name here']
    runbook: x
extra: 1
"""


def test_validation_reports_every_problem_with_file_line_and_key() -> None:
    with pytest.raises(SignatureFileError) as info:
        parse_signatures(BAD, "sig.yaml")
    problems = info.value.problems
    text = "\n".join(problems)
    expected = [
        "sig.yaml:7: signatures[1].name: must be lower_snake_case",
        "sig.yaml:8: signatures[1].category: 'gpu_melted' is not one of",
        "sig.yaml:9: signatures[1].severity: 'loud' is not one of",
        "sig.yaml:10: signatures[1].colour: unknown key",
        "sig.yaml:12: signatures[1].patterns[0]: invalid regular expression",
        "sig.yaml:13: signatures[1].patterns[1]: needs a literal of at least 4 characters",
        "sig.yaml:14: signatures[1].patterns[2]: named groups are not allowed",
        "sig.yaml:15: signatures[1].context_after: must be an integer from 0 to 50",
        "sig.yaml:16: signatures[1].runbook: must be a non-empty string",
        "sig.yaml:17: signatures[2].name: duplicate signature 'ok_one' (first on line 2)",
        "sig.yaml:22: extra: unknown key",
    ]
    for fragment in expected:
        assert fragment in text, fragment


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("signatures:\n  - name: [unclosed\n")
    with pytest.raises(SignatureFileError) as info:
        load_signature_file(path)
    assert re.match(rf"{re.escape(str(path))}:\d+: YAML syntax error", info.value.problems[0])


def test_unreadable_file_is_a_signature_file_error(tmp_path: Path) -> None:
    with pytest.raises(SignatureFileError, match="cannot read"):
        load_signature_file(tmp_path / "missing.yaml")
