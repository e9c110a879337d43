"""Name a crash by its failure family when no specific signature knows its wording.

Signatures match wordings; a new release or another server words the same
failure differently. This layer reads what every crash report keeps stable
and maps it to a family by vocabulary:

- the *statements* of the excerpt: each exception line (class and message)
  with the lines that continue it, and the plain error lines around the
  tracebacks (frames and source lines are not statements);
- the *frames* (function and file names) and the process names, which say
  where the error was raised: while loading the model, in the engine's busy
  loop, in a collective.

It is asked about an event that a generic hit names: the catch-all
(an unknown traceback that ended its process, a bare exit code) or a
signature of a downstream symptom (the engine died, the engine or a shard
failed to start). Root cause beats symptom: the earliest statement whose
family is a cause names the event; the engine-hang family (a timeout in the
engine's own loop) is itself a symptom-level family and names the event only
when no statement shows a cause.

It may also open an event (`opening`): where a line carries a fatal marker
(the `family_fatal_marker` signature: an error or fatal level, an abort, an
exit) and that line, or an error line among the 30 before it, speaks the
words of a family in `OPENERS`. Only families whose words say a process
cannot go on open one (device and host memory, collectives, compilers, a
model cache or file that cannot be written or read); a refused request, a
slow step or a model's name in a handled error does not.

Each family names a representative signature of the signature file (its
category and runbook); a signature file without it keeps the generic name.
The vocabulary comes from the signatures' own patterns and the tuned part of
the corpus (tests/data/logs/corpus/crash), never from the held-out split.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Family:
    """A failure family: the signature that speaks for it and how its statements read."""

    name: str
    signature: str  # representative signature (category, runbook) in the signature file
    statement: re.Pattern[str]  # a statement of this family ...
    also: re.Pattern[str] | None = None  # ... that must also match this (same statement)
    where: re.Pattern[str] | None = None  # ... raised where frames/processes match this
    symptom: bool = False  # names the event only when no cause-family statement is found


_MEMORY = (r"(?i:out of memory|OutOfMemory|\bOOM\b|failed to allocate|allocation failed|"
           r"could not allocate|cannot allocate|unable to allocate|not enough memory|"
           r"insufficient memory|memory exhausted|exceeds? (?:the )?(?:available )?memory|"
           r"ALLOC_FAILED|MemoryAllocation|RESOURCE_EXHAUSTED|"
           # a memory named by where it is: "lack of device memory", "insufficient GPU
           # memory", "out of device memory", Vulkan's and Level Zero's OUT_OF_DEVICE_MEMORY
           r"(?:lack of|insufficient|not enough|out of|no more) (?:free )?"
           r"(?:device|gpu|video|npu|hbm|vram|accelerator) memory|"
           r"OutOfDeviceMemory|OUT_OF_DEVICE_MEMORY)")
_DEVICE_WORDS = (r"(?:CUDA|cuda|GPU|gpu|HIP|hip[A-Z]|ROCm|rocm|NPU|npu|HPU|hpu|VRAM|vram|"
                 r"PT_DEVMEM|[Hh]abana|Gaudi|synDevice|"
                 # the other backends' names: Apple Metal, Vulkan, Intel SYCL/Level Zero/XPU,
                 # Apple MPS, Huawei CANN, Moore Threads MUSA (ggml names its buffers by them)
                 r"[Mm]etal|MTL|[Vv]ulkan|vk::|SYCL|sycl|[Ll]evel[ _][Zz]ero|XPU|xpu|MPS|CANN|"
                 r"MUSA|"
                 r"[Dd]evice|cuBLAS|CUBLAS|cudnn|CUDNN|torch\.OutOfMemoryError|"
                 r"torch\.cuda\.OutOfMemoryError|OutOfMemoryError\()")

FAMILIES: tuple[Family, ...] = (
    # TPU/XLA device memory: RESOURCE_EXHAUSTED, "hbm", the allocator's words on a TPU
    Family("tpu_hbm_memory", "xla_hbm_oom",
           # (and the older mixed-case status text, not TensorFlow's GPU wording of it)
           re.compile(r"RESOURCE_EXHAUSTED|Resource exhausted: (?!OOM when allocating tensor)|"
                      r"(?i:\bhbm\b)|(?:TPU|XLA|xla|[Tt]pu)\b.{0,80}" + _MEMORY),
           also=re.compile(_MEMORY + r"|(?i:\bhbm\b)|Attempting to (?:allocate|reserve)")),
    # Accelerator memory: the allocator's words next to a device word
    Family("device_memory", "cuda_oom", re.compile(_MEMORY),
           also=re.compile(_DEVICE_WORDS)),
    # Host memory refused outright (Python's MemoryError, ENOMEM, system RAM)
    Family("host_memory", "host_memory_exhausted",
           re.compile(r"\bMemoryError\b|(?i:system memory|host memory|\bRAM\b|ENOMEM|"
                      r"Cannot allocate memory|bad_alloc)|DefaultCPUAllocator|CPUAllocator")),
    # A request longer than the model's window: context/tokens/window + exceed/too long
    Family("context_window", "vllm_context_length_exceeded",
           re.compile(r"(?i:context(?: window| length| size| limit)?|\btokens?\b|prompt|"
                      r"max_model_len|max_seq_len|\bn_ctx\b|input length|sequence length)"
                      r".{0,80}(?i:exceed|too long|longer than|greater than|larger than|"
                      r"more than|must be (?:less|at most|<=|smaller)|over the limit|too large)"
                      r"|(?i:exceed|too long|longer than|greater than|larger than)"
                      r".{0,80}(?i:context|\btokens?\b|max_model_len|\bn_ctx\b|window)"),
           also=re.compile(r"(?i:token|context|window|n_ctx|max_model_len|max_seq_len)")),
    # A failure while capturing the device graph (CUDA or HIP graphs): the server is
    # still starting, whatever reported it (the process-group watchdog, the runtime)
    Family("graph_capture", "engine_startup_exception",
           re.compile(r"(?i:stream is capturing|stream ?capture|graph capture|"
                      r"capturing (?:cuda |hip )?graphs?|capture_begin|capture_model)")),
    # Collectives between ranks and hosts, whatever the library (HCCL's EI/EJ codes too)
    Family("collective", "collective_failure",
           re.compile(r"\bE[IJ]\d{4}\b|NCCL|nccl[A-Z]|HCCL|[Hh]ccl|RCCL|[Gg]loo\b|\bMPI_|\bMPI\b|oneCCL|"
                      r"(?i:collective(?!_rpc)|all_?reduce|all_?gather|reduce_scatter|all_to_all|"
                      # a kernel's or module's file name (custom_all_reduce.cu) is no failure
                      r"broadcast)(?![\w-]*\.(?:cuh?|cpp|cc|h|hpp|py|so)\b)|"
                      r"ProcessGroup|DistBackendError|DistNetworkError|"
                      r"DistStoreError|TCPStore|c10d|(?i:rendezvous)|ibv_|InfiniBand|NVLink|"
                      r"NET/IB|IBV_WC_|\bUCX\b|UCS_ERR_|\bRDMA\b|RoCE")),
    # An accelerator runtime's failed call on a stream or the device (ACL's stream
    # synchronisation, torch_npu's failed ACL call, a HIP/SYCL stream sync): the device
    # context is lost, the root cause of the engine death printed after it (issue 51,
    # fourth round). After the collectives: an HCCL failure under it names the event.
    Family("device_runtime", "accelerator_status_error",
           re.compile(r"(?i:synchroni[sz]e ?stream\w* (?:failed|error)|"
                      r"stream ?synchroni[sz]\w* (?:failed|error)|stream sync\w* failed|"
                      r"call acl api failed|acl\w* (?:api )?(?:call )?failed|"
                      r"NPU function error)|AclrtSynchronize\w*|aclrtSynchronize\w*|"
                      r"\bERR\d{5} (?:PTA|OPS|DIST|GRAPH|PROF)\b")),
    # Kernel and graph compilation (Triton, Inductor, Dynamo, XLA, MLIR)
    Family("compilation", "xla_compile_failed",
           re.compile(r"(?i:compil(?:e|ation|er)\b.{0,60}(?:error|fail)|"
                      r"(?:error|fail\w*).{0,60}\bcompil(?:e|ation|ing)\b)|"
                      r"CompilationError|BackendCompilerFailed|InductorError|LoweringException|"
                      r"torch\._inductor\.exc|PTXASError|triton\.compiler\.errors|"
                      r"[Tt]riton.{0,40}(?:[Ee]rror|[Ff]ail)|PassManager|MLIR|ptxas|nvcc")),
    # The model could not be fetched or loaded: credentials, missing or bad files,
    # an architecture or adapter the server does not know, an initialisation failure.
    Family("model_load", "model_load_failed",
           re.compile(r"\b40[13] (?:Client Error|Unauthorized|Forbidden)|"
                      r"(?i:status(?: code)?[ =:]*40[13]\b)|Unauthorized|Forbidden|"
                      r"(?i:gated)|GatedRepo|"
                      r"RepositoryNotFound|EntryNotFound|RevisionNotFound|LocalEntryNotFound|"
                      r"(?i:safetensors|checkpoint|config\.json|tokenizer|\.gguf\b|"
                      r"weights?\b|architecture|trust_remote_code|adapter|LoRA)|"
                      r"(?i:(?:error|fail\w*)\s+(?:when |while |to |in )?"
                      r"(?:initializ\w*|load\w*|start\w*)\s+(?:the )?"
                      r"(?:model|engine|shard|worker|weights|tokenizer))|"
                      # the other word order: "model failed to load", "weights could not
                      # be loaded"
                      r"(?i:(?:model|weights|shard|tokenizer)\s+(?:failed|could not)\s+"
                      r"(?:to\s+)?(?:be\s+)?load)")),
    # The model cache cannot be written: the hub's download (or the server's cache
    # directory) refused by the file system (a container user without a home, a
    # read-only mount); the statement or where it was raised names the cache
    Family("model_cache", "model_load_failed",
           re.compile(r"PermissionError|(?i:permission denied|read-only file system|"
                      r"not a writable directory|EACCES|EROFS)"),
           where=re.compile(r"(?i:\.cache|huggingface|hf_hub|HF_HOME|TRANSFORMERS_CACHE|"
                            r"snapshot_download|hub\.py|file_download|model weights|"
                            r"modelscope|download_dir|cache_dir)")),
    # A model file or directory that is not there, raised while loading
    Family("model_missing", "model_load_failed",
           re.compile(r"(?i:not found|No such file|does not exist|FileNotFoundError|"
                      r"not a valid|is not a directory)"),
           where=re.compile(r"(?i:load_model|from_pretrained|get_config|hf_hub_download|"
                            r"snapshot_download|load_weights|get_model|model_loader|"
                            r"get_tokenizer|cached_file|download|init_device)")),
    # A model file that is there but unreadable (empty, truncated, not the format
    # its name says: a zero-byte config.json, a cut-off download), raised while loading
    Family("model_corrupt", "model_load_failed",
           re.compile(r"JSONDecodeError|(?i:expect(?:ing|ed) value|EOF while parsing|"
                      r"unexpected end of (?:file|data|json)|unexpected EOF|"
                      r"HeaderTooLarge|MetadataIncompleteBuffer|InvalidHeader|"
                      r"deserializ\w* (?:the )?header|UnpicklingError|invalid load key|"
                      r"PytorchStreamReader failed|not a zip file|central directory|"
                      r"truncated|corrupt)"),
           where=re.compile(r"(?i:load_model|from_pretrained|get_config|_dict_from_json_file|"
                            r"configuration_utils|tokenization_utils|from_file|safe_open|"
                            r"load_state_dict|load_weights|get_model|model_loader|"
                            r"get_tokenizer|cached_file|hf_hub_download|snapshot_download|"
                            r"gguf)")),
    # An exception raised inside the kernel compiler (Inductor's code generation,
    # Triton's compiler, their compile workers), whatever its words; a frame is
    # "path function", and a module's import (`<module>`) is not compiling
    Family("compile_path", "xla_compile_failed",
           re.compile(r"(?:Error|Exception)\b"),
           where=re.compile(r"(?:torch/_inductor/|triton/compiler/)\S* (?!<)|"
                            r"compile_to_module")),
    # The engine stopped making progress: a timeout or watchdog in its own loop
    Family("engine_hang", "engine_hang_watchdog",
           re.compile(r"TimeoutError|(?i:timed out|time out|timeout|watchdog|heartbeat|"
                      r"\bhang|\bhung\b|stuck|deadlock|not responding|no response)"),
           where=re.compile(r"(?i:EngineCore|engine_core|run_busy_loop|busy_loop|step_fn|"
                            r"execute_model|collective_rpc|scheduler|Scheduler|"
                            r"event_loop|model_runner|[Ww]orker|detokeniz|tp_worker)"),
           symptom=True),
)

# Device memory in any runtime's words: the cause of a compile failure or a fault it
# comes with (sentinel/logs/naming.py). A TPU's memory is the XLA signatures' own.
MEMORY_FAMILIES = frozenset({"device_memory"})
# Families whose words next to a fatal marker say a process cannot go on (`opening`).
OPENERS = frozenset({"tpu_hbm_memory", "device_memory", "host_memory", "collective",
                     "compilation", "graph_capture", "model_cache", "model_missing",
                     "model_corrupt"})

_FRAME = re.compile(r'File "([^"]+)", line \d+, in (\S+)')
# A line outside a traceback that reports an error (a level word or the words of one),
# or trouble with a peer that a library logs only as a warning: c10d's store socket
# "timed out after 1800000ms", a refused or reset connection. Such a line is often
# the root cause of the engine death printed after it, and carries no error word.
# Matched case-insensitively (the lowercased line), and glog's E/F level prefix.
_ERROR_WORDS = ("error", "fail", "fatal", "exception", "critical", "abort", "panic",
                "timed out", "connection refused", "connection reset", "reset by peer",
                "unreachable")
_PEER_CLOSED = re.compile(r"closed by (?:the )?(?:remote )?peer")
_GLOG_LEVEL = re.compile(r"\b[EF]\d{4} ")
# Source lines and caret markers of a traceback whose header the group did not
# see (the message, after a `[file:line]`, `|` or no prefix, is indented).
_SOURCE_LINE = re.compile(r"(?:^|[\]|] )\s{2,}\S|^\s*\^+\s*$|\]\s+\^+\s*$")


@dataclass(frozen=True, slots=True)
class Found:
    """The family that names an event and the statement that showed it."""

    family: Family
    index: int  # position of the statement in the list given to `find`


def frames_of(line: str) -> str | None:
    """`path function` of a traceback frame line, or None when the line is not a frame."""
    m = _FRAME.search(line)
    return f"{m.group(1)} {m.group(2)}" if m else None


def is_error_line(line: str) -> bool:
    """Whether a line outside a traceback reports an error (a statement for `find`).

    The words are looked for as substrings of the lowercased line: a fifth
    of a case-insensitive regex's cost, paid for every line of a group.
    """
    low = line.lower()
    found = any(word in low for word in _ERROR_WORDS) \
        or ("closed by" in low and _PEER_CLOSED.search(low) is not None) \
        or _GLOG_LEVEL.search(line) is not None
    return found and _SOURCE_LINE.search(line) is None


def family_of(statement: str, where: str) -> Family | None:
    """The first family whose vocabulary this statement speaks (given where it was raised)."""
    for fam in FAMILIES:
        if not fam.statement.search(statement):
            continue
        if fam.also is not None and not fam.also.search(statement):
            continue
        if fam.where is not None and not (fam.where.search(where) or fam.where.search(statement)):
            continue
        return fam
    return None


_MEMORY_RX = re.compile(_MEMORY)


@functools.lru_cache(maxsize=4096)
def device_memory(statement: str) -> Family | None:
    """The device-memory family (`MEMORY_FAMILIES`) when this statement speaks it, else None.

    One regex first (the allocator's words), the families in order only for the
    few statements that have them; cached, as `opening` is: a crash storm repeats
    its lines.
    """
    if _MEMORY_RX.search(statement) is None:
        return None
    fam = family_of(statement, "")
    return fam if fam is not None and fam.name in MEMORY_FAMILIES else None


def opening(statements: Iterable[str]) -> Family | None:
    """The first of `OPENERS` that these lines speak (a fatal marker's window), or None.

    Only error lines count (`is_error_line`). The lines say where too (no
    frames are known outside a traceback): a missing file is a load failure
    only when its own line names loading. A line's answer is cached: the
    same 30 lines are the window of every marker in a burst of them.
    """
    for text in statements:
        fam = _opener_of(text)
        if fam is not None:
            return fam
    return None


@functools.lru_cache(maxsize=4096)
def _opener_of(text: str) -> Family | None:
    if not is_error_line(text):
        return None
    fam = family_of(text, "")
    return fam if fam is not None and fam.name in OPENERS else None


def find(statements: Iterable[str], where: str) -> Found | None:
    """The family of the earliest cause statement, else of the earliest symptom statement.

    `where` is every frame and process name of the excerpt joined: the place
    an exception was raised qualifies families that need it (a timeout is an
    engine hang only inside the engine; a missing file is a load failure only
    while loading).
    """
    symptom: Found | None = None
    for i, text in enumerate(statements):
        fam = family_of(text, where)
        if fam is None:
            continue
        if not fam.symptom:
            return Found(fam, i)
        if symptom is None:
            symptom = Found(fam, i)
    return symptom
