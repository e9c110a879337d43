"""The family layer: a crash no signature names is named by its failure family.

Every excerpt below is written for the test (the wordings are invented, so
no signature knows them), in the shapes servers print: vLLM's prefixed
process lines, a bare Python traceback, a launcher's plain lines. What they
pin is the structure of `sentinel/logs/families.py`: the exception's words
and where it was raised decide the family; the earliest cause beats the
symptoms after it; a timeout is a hang only inside the engine; the layer
renames an event but never creates one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.logs import Classifier, SignatureSet, families, load_signature_file
from sentinel.logs.signatures import parse_signatures
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


def bare_traceback(exception: str, frames: tuple[str, ...] = ("serve", "step")) -> str:
    """A traceback as Python's default hook prints it (the process ended on it)."""
    body = "".join(f'  File "/srv/app/{f}.py", line 10, in {f}\n    {f}()\n' for f in frames)
    return f"Traceback (most recent call last):\n{body}{exception}\n"


P = "(EngineCore_DP0 pid=41) ERROR 11-27 10:00:00 [core.py:900]"


@pytest.mark.parametrize(("exception", "category"), [
    # accelerator memory in words no signature has: the device word decides
    ("RuntimeError: the GPU allocator could not allocate 2.00 GiB for the batch",
     "cuda_oom"),
    ("xla.RuntimeError: RESOURCE_EXHAUSTED: slab of 512M refused on chip 3", "hbm_oom"),
    # Habana's bridge names its device-memory module, not the device
    ("RuntimeError: FATAL ERROR :: MODULE:PT_DEVMEM could not allocate the graph's "
     "workspace", "cuda_oom"),
    # host memory refused
    ("RuntimeError: the loader ran out of host memory while pinning weights",
     "startup_failure"),
    # a request longer than the window, in a new wording
    ("ValueError: prompt of 9000 tokens exceeds the window of 8192", "context_length_exceeded"),
    # a collective between ranks
    ("RuntimeError: all_reduce on ring 0 aborted by peer 3", "interconnect_failure"),
    # a kernel compiler
    ("RuntimeError: kernel compile failed for shape (8, 128)", "compile_failure"),
    # credentials refused while fetching the model
    ("HubError: status code 401 for the weights index", "startup_failure"),
])
def test_an_unknown_fatal_traceback_is_named_by_its_family(
        sigs: SignatureSet, exception: str, category: str) -> None:
    assert [e.category for e in events(sigs, bare_traceback(exception))] == [category]


def test_without_family_words_the_catch_all_keeps_the_event(sigs: SignatureSet) -> None:
    found = events(sigs, bare_traceback("KeyError: 'rope_theta_v2'"))
    assert [(e.category, e.signature) for e in found] == [("other", "unclassified_crash")]


def test_memory_words_without_a_device_word_stay_unnamed(sigs: SignatureSet) -> None:
    # "failed to allocate" alone could be host, disk or device: no guess
    found = events(sigs, bare_traceback("RuntimeError: failed to allocate the slot table"))
    assert [e.signature for e in found] == ["unclassified_crash"]


def test_a_timeout_outside_the_engine_is_not_named_a_hang(sigs: SignatureSet) -> None:
    found = events(sigs, bare_traceback("TimeoutError: webhook did not answer",
                                        ("notify", "post")))
    assert [e.signature for e in found] == ["unclassified_crash"]


def test_the_earliest_cause_names_the_event_not_the_symptoms_after_it(sigs: SignatureSet) -> None:
    # a launcher: the shard's load failure, then the launcher's generic lines
    text = "\n".join([
        "2026-11-27T10:00:00Z ERROR shard-manager: launcher: Error when initializing model",
        "Traceback (most recent call last):",
        '  File "/srv/server.py", line 20, in serve',
        "    model = get_model(model_id)",
        "RuntimeError: tensor lm_head.bias is missing from the checkpoint",
        " rank=0",
        "2026-11-27T10:00:01Z ERROR launcher: Shard 0 failed to start",
        "Error: ShardCannotStart",
    ])
    found = events(sigs, text)
    assert [(e.category, e.signature) for e in found] == [("startup_failure", "model_load_failed")]
    assert found[0].line_no == 1  # the cause's line
    assert any("ShardCannotStart" in line for line in found[0].excerpt)  # symptoms kept


def test_the_layer_never_creates_an_event(sigs: SignatureSet) -> None:
    # a handled exception with OOM words that the process survives: nothing
    text = "\n".join([
        "INFO 11-27 10:00:00 [server.py:1] request 7 started",
        "ERROR 11-27 10:00:01 [server.py:2] request 7 failed",
        "Traceback (most recent call last):",
        '  File "/srv/server.py", line 20, in handle',
        "    run(req)",
        "RuntimeError: the GPU allocator could not allocate 2.00 GiB for the batch",
        "INFO 11-27 10:00:02 [server.py:3] request 8 started",
        'INFO:     10.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK',
    ])
    assert events(sigs, text) == []


def test_a_signature_file_without_the_representative_keeps_the_catch_all() -> None:
    bare = SignatureSet(parse_signatures("signatures:\n"
                            "  - name: unclassified_crash\n    category: other\n"
                            "    severity: critical\n    priority: 5\n"
                            "    patterns: ['Fatal Python error']\n    runbook: r\n"))
    found = events(bare, bare_traceback("RuntimeError: CUDA allocator is out of memory"))
    assert [(e.category, e.signature) for e in found] == [("other", "unclassified_crash")]


@pytest.mark.parametrize("line", [
    'ERROR 11-27 10:00:00 [core.py:1]     raise TimeoutError(f"RPC call to {m} timed out.")',
    "ERROR 11-27 10:00:00 [core.py:1]                  ^^^^^^^^^^",
    "  | [Stage-1] ERROR 01-29 19:03:10 [x.py:1]     outputs = await get_output_error()",
])
def test_source_lines_of_a_traceback_are_not_statements(line: str) -> None:
    assert not families.is_error_line(line)


def test_vllm_collective_rpc_is_not_a_collective() -> None:
    assert families.family_of("RuntimeError: collective_rpc failed in step", "") is None


@pytest.mark.parametrize("line", [
    # a client printing the server's refusal on one plain line, in wordings no single
    # sentence of the signature file spells: the window's name next to the verb
    "openai.BadRequestError: Error code: 400 - {'message': \"request of 9000 tokens exceeds"
    " the model's context window (8192)\", 'code': 400}",
    "2026-11-27 10:00:00 WARN client: upstream said: Context length exceeded (9000 > 8192)",
    "error: prompt too long (9000 tokens, max 8192)",
    "retrying in 2 s: input of 9000 tokens is longer than the maximum sequence length",
    '{"error": {"code": "context_length_exceeded", "message": "shorten the request"}}',
    "Exception: Requested tokens (9000) exceeded context limit of 8192",
])
def test_a_context_length_refusal_on_a_plain_line_is_named(sigs: SignatureSet, line: str) -> None:
    assert [e.category for e in events(sigs, line)] == ["context_length_exceeded"]


@pytest.mark.parametrize("line", [
    # the NCCL watchdog's lines, each on its own: an excerpt cut short keeps only some
    "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
    ":565 (most recent call first):",
    "[rank3]:[E1206 18:44:12 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 3] Exception (either an"
    " error or timeout) detected by watchdog at work: 7753",
])
def test_the_collective_watchdog_is_known_by_any_of_its_first_lines(
        sigs: SignatureSet, line: str) -> None:
    assert [e.category for e in events(sigs, line)] == ["interconnect_failure"]


@pytest.mark.parametrize("line", [
    # configuration checks and tokenizer hints that name the window without a refusal
    "ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (4096).",
    "Token indices sequence length is longer than the specified maximum sequence length"
    " for this model (564 > 512). Running this sequence through the model will result in"
    " indexing errors",
    "WARNING 11-27 10:00:00 [config.py:1] max_num_batched_tokens (8192) exceeds"
    " max_num_seqs * max_model_len (4096). This may lead to unexpected behavior.",
])
def test_the_window_named_without_a_refusal_is_not_a_context_length_event(
        sigs: SignatureSet, line: str) -> None:
    assert [e.category for e in events(sigs, line)] != ["context_length_exceeded"]


V0 = "ERROR 11-27 10:00:00 engine.py:387]"
API = "(APIServer pid=1) ERROR 11-27 10:00:01 [async_llm.py:400]"


@pytest.mark.parametrize(("lines", "expected"), [  # category, or category/signature
    pytest.param([  # the engine core's own log of the exception it dies on (no engine-dead yet)
        f"{P} Traceback (most recent call last):",
        f'{P}   File "/v/engine/core.py", line 700, in run_busy_loop',
        f"{P}     self._step()",
        f'{P}   File "/v/executor/ipc.py", line 30, in wait_reply',
        f"{P}     raise TimeoutError",
        f"{P} TimeoutError",
    ], "engine_dead/engine_hang_watchdog", id="a timeout in the engine loop is a hang"),
    pytest.param([
        f"{P} EngineCore failed to start.",
        f"{P} Traceback (most recent call last):",
        f'{P}   File "/v/engine/core.py", line 500, in __init__',
        f"{P}     self.model_executor = executor_class(vllm_config)",
        f'{P}   File "/v/executor/ipc.py", line 30, in wait_reply',
        f"{P}     raise TimeoutError('workers did not report in time')",
        f"{P} TimeoutError: workers did not report in time",
    ], "startup_failure", id="a timeout while starting stays a start-up failure"),
    pytest.param([
        f"{P} Traceback (most recent call last):",
        f'{P}   File "/v/worker/runner.py", line 80, in execute_model',
        f"{P}     out = self.model(x)",
        f"{P} RuntimeError: device 0 allocator: not enough memory for 1.5 GiB",
        f"{API} AsyncLLM output_handler failed.",
        f"{API} vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    ], "cuda_oom", id="a device OOM before the engine death names it"),
    pytest.param([  # v0's client: the heartbeat loop finds the engine process gone while serving
        "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
        'INFO:     10.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK',
        "INFO 11-27 10:00:00 engine.py:267] Added request cmpl-1.",
        "ERROR 11-27 10:00:09 client.py:282] RuntimeError('Engine process (pid 4242) died.')",
        "ERROR 11-27 10:00:09 client.py:282] NoneType: None",
        "CRITICAL 11-27 10:00:10 launcher.py:99] MQLLMEngine is already dead, terminating"
        " server process",
        "INFO:     Shutting down",
    ], "engine_dead", id="a v0 engine death after serving is not a start-up failure"),
    pytest.param([  # an exception no signature knows, raised while v0 built its engine
        f"{V0} Frobnicator rejected tensor 12",
        f"{V0} Traceback (most recent call last):",
        f'{V0}   File "/v/engine/multiprocessing/engine.py", line 378, in run_mp_engine',
        f"{V0}     engine = MQLLMEngine.from_engine_args(engine_args=engine_args,",
        f'{V0}   File "/v/engine/multiprocessing/engine.py", line 121, in from_engine_args',
        f"{V0}     return cls(ipc_path=ipc_path,",
        f"{V0} KeyError: 'frobnicator'",
    ], "startup_failure", id="a v0 engine failing in from_engine_args is a start-up failure"),
])
def test_one_excerpt_one_event_named_by_where_and_what_failed(
        sigs: SignatureSet, lines: list[str], expected: str) -> None:
    found = events(sigs, "\n".join(lines))
    named = [f"{e.category}/{e.signature}" if "/" in expected else e.category for e in found]
    assert named == [expected]


@pytest.mark.parametrize(("line", "category"), [
    # plain lines of known families in wordings their signatures name by the stable part
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: TPU backend error: out of"
     " memory allocating 2147483648 bytes", "hbm_oom"),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory in memory"
     " space vmem. Used 32.42M of 16.00M vmem.", "compile_failure"),
    ("I1127 10:00:00 health.go:1] XidCriticalError: Xid=48 on Device=GPU-1234, the device"
     " will go unhealthy.", "other"),
    ("Failed to initialize NVML: Driver/library version mismatch", "startup_failure"),
    ("[ERROR] HCCL(4242,python):2026-11-27-10:00:00 [hccl.cc:1] EI0006: Getting socket"
     " times out.", "interconnect_failure"),
    ("RuntimeError: synStatus=8 [Device not found] Device acquire failed.", "startup_failure"),
    ("[PT_BRIDGE][error] graph.cpp: 599Graph compile failed. synStatus=synStatus 26 [Generic"
     " failure]. compile", "compile_failure"),
    ("RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for"
     " size::234881024 (224)MB", "cuda_oom"),
])
def test_a_known_family_in_another_wording_on_a_plain_line(
        sigs: SignatureSet, line: str, category: str) -> None:
    assert [e.category for e in events(sigs, line)] == [category]


@pytest.mark.parametrize(("line", "category"), [
    # the orchestrator's view of a server that never came up: one rule, a start-up failure
    ("pod/llm-7f9c-x2x   0/1   CrashLoopBackOff   7 (41s ago)   19m", "startup_failure"),
    ("  Warning  BackOff  3m (x40 over 19m)  kubelet  Back-off restarting failed container"
     " server in pod llm-7f9c-x2x_default(1234)", "startup_failure"),
    ("  Normal   Killing  9m  kubelet  Container server failed startup probe, will be"
     " restarted", "startup_failure"),
    # a device allocation failing while loading is the device's OOM, whatever names it
    ("llama_model_load: error loading model: unable to allocate ROCm1 buffer", "cuda_oom"),
    ("Error: 500 Internal Server Error: llama runner process has terminated: error loading"
     " model: unable to allocate Vulkan0 buffer", "cuda_oom"),
    ("CUDA Error: out of memory at /src/csrc/cumem_allocator.cpp:91", "cuda_oom"),
    # ... but a host-side buffer is host memory (a start-up failure), not the device's
    ("llama_model_load: error loading model: unable to allocate CUDA_Host buffer",
     "startup_failure"),
    # NCCL's InfiniBand transport in the IB verbs' own words
    ("host:1:9 [3] transport/net_ib.cc:180 NCCL WARN NET/IB : mlx5_4:1 async fatal event on"
     " QP (0x55aa): local access violation work queue error", "interconnect_failure"),
    ("host:1:9 [3] transport/net_ib.cc:2451 NCCL WARN NET/IB : Got completion from peer"
     " 10.0.0.7<4242> with status=12 opcode=1 len=0 vendor err 129 (Recv)",
     "interconnect_failure"),
    ("host:1:9 [3] misc/ibvwrap.cc:100 NCCL WARN Call to ibv_modify_qp failed with error"
     " Connection timed out", "interconnect_failure"),
    # UCX under MPI or a KV-cache connector
    ("[1764237600.1] [host:42:0] ucp_worker.c:1 UCX  ERROR   peer failure on endpoint"
     " 0x7f: UCS_ERR_ENDPOINT_TIMEOUT", "interconnect_failure"),
])
def test_families_the_last_held_out_batch_named_by_their_stable_words(
        sigs: SignatureSet, line: str, category: str) -> None:
    assert [e.category for e in events(sigs, line)] == [category]


@pytest.mark.parametrize("line", [
    # the kubelet waiting for a server that is still loading: not a crash by itself
    '  Warning  Unhealthy  2m (x12 over 4m)  kubelet  Readiness probe failed: Get'
    ' "http://10.1.2.3:8000/health": dial tcp 10.1.2.3:8000: connect: connection refused',
    '  Warning  Unhealthy  2m (x12 over 4m)  kubelet  Startup probe failed: Get'
    ' "http://10.1.2.3:8000/health": dial tcp 10.1.2.3:8000: connect: connection refused',
    # NCCL choosing its IB devices, ggml sizing its device buffers
    "node1:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB"
    " eth0:10.0.0.1<0>",
    "llm_load_tensors:      CUDA0 buffer size = 16192.69 MiB",
])
def test_the_same_families_healthy_words_raise_nothing(sigs: SignatureSet, line: str) -> None:
    assert events(sigs, line) == []


@pytest.mark.parametrize(("exception", "frames", "category"), [
    # an empty or cut-off model file is a load failure, raised where the config is read ...
    ("json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
     ("get_config", "get_config_dict", "_dict_from_json_file", "loads"), "startup_failure"),
    ("Exception: expected value at line 1 column 1",
     ("get_tokenizer", "from_pretrained", "from_file"), "startup_failure"),
    ("_pickle.UnpicklingError: invalid load key, '<'.",
     ("load_weights", "load_state_dict"), "startup_failure"),
    # ... the same words anywhere else stay the catch-all's
    ("json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
     ("serve", "handle_request", "loads"), "other"),
])
def test_an_unreadable_model_file_is_a_load_failure_only_while_loading(
        sigs: SignatureSet, exception: str, frames: tuple[str, ...], category: str) -> None:
    assert [e.category for e in events(sigs, bare_traceback(exception, frames))] == [category]


@pytest.mark.parametrize(("line", "category"), [
    # a wrapper or supervisor giving up on a server that never answered
    ("2026-11-27 10:00:00.000 [Error] (Supervisor) sglang-server failed to start within"
     " timeout", "startup_failure"),
    ("Error: timed out waiting for the model server to become ready", "startup_failure"),
    ("launcher: backend did not become healthy after 600s", "startup_failure"),
    # ... while waiting for it is only waiting
    ("Waiting for vllm-server to be ready (timeout: 600s)...", None),
])
def test_a_server_that_never_became_ready_is_a_start_up_failure(
        sigs: SignatureSet, line: str, category: str | None) -> None:
    assert [e.category for e in events(sigs, line)] == ([category] if category else [])


@pytest.mark.parametrize(("line", "category"), [
    # device memory refused in the driver API's, NCCL's and the CUDA libraries' words
    ("RuntimeError: CUDA driver error: out of memory", "cuda_oom"),
    ("host:1:9 [3] include/alloc.h:100 NCCL WARN Cuda failure 2 'out of memory'", "cuda_oom"),
    ("RuntimeError: CUDA error: CUDNN_STATUS_ALLOC_FAILED", "cuda_oom"),
    # host memory refused by torch's CPU allocator
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough"
     " memory: you tried to allocate 1234 bytes.", "startup_failure"),
    # collectives: a remote rank gone, torch elastic's rendezvous
    ("ncclRemoteError: A call failed possibly due to a network error or a remote process"
     " exiting prematurely.", "interconnect_failure"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to"
     " the C10d store has failed.", "interconnect_failure"),
])
def test_allocator_and_collective_words_of_other_layers(
        sigs: SignatureSet, line: str, category: str) -> None:
    assert [e.category for e in events(sigs, line)] == [category]


@pytest.mark.parametrize(("exception", "category"), [
    # the layer's vocabulary for the same families, in wordings no signature has
    ("RuntimeError: RendezvousTimeout while waiting for 2 nodes", "interconnect_failure"),
    ("RuntimeError: RDMA write to rank 3 failed with status 12", "interconnect_failure"),
    ("RuntimeError: CPUAllocator refused 8 GiB for the pinned staging buffer",
     "startup_failure"),
])
def test_the_layer_knows_rendezvous_rdma_and_the_cpu_allocator(
        sigs: SignatureSet, exception: str, category: str) -> None:
    assert [e.category for e in events(sigs, bare_traceback(exception))] == [category]


# --- November 2026, tuned batch 6: the design where fresh batches showed it could not hold


@pytest.mark.parametrize(("signal", "category"), [
    ("SIGTERM", None), ("SIGINT", None),  # a request to stop: the process is being stopped
    ("SIGSEGV", "other"), ("SIGABRT", "other"), ("SIGBUS", "other"), ("SIGILL", "other"),
    ("SIGFPE", "other"),
])
def test_a_stack_dump_on_a_stop_request_is_not_a_crash(
        sigs: SignatureSet, signal: str, category: str | None) -> None:
    """absl dumps a stack for every signal it handles; only a fault's signal is a crash."""
    got = events(sigs, f"""
(RayWorkerWrapper pid=7) INFO 11-27 10:00:00 [worker.py:1] finished 12 prompts
*** {signal} received at time=1764230400 on cpu 3 ***
PC: @     0x7f0000001234  (unknown)  pthread_cond_wait@@GLIBC_2.3.2
    @     0x7f0000005678  (unknown)  (unknown)
[2026-11-27 10:00:00,001 E 7 7] logging.cc:440: *** {signal} received at time=1764230400 ***
[2026-11-27 10:00:00,001 E 7 7] logging.cc:440: PC: @     0x7f0000001234  (unknown)  (unknown)
""")
    assert [e.category for e in got][:1] == ([category] if category else [])


DEATHS = (  # every server's words for its engine dying (the symptom)
    "(APIServer pid=9) ERROR 11-27 10:00:09 [async_llm.py:1] AsyncLLM output_handler failed.",
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
    "trace (above) for the root cause.",
    "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already.",
    "[2026-11-27 10:00:09] Received sigquit from a child process. It usually means the child "
    "failed.",
    "[2026-11-27 10:00:09 TP0] DetokenizerManager hit an exception: see the scheduler",
    "2026-11-27T10:00:09.000000Z ERROR text_generation_launcher: Shard 0 crashed",
)
FILLER = "\n".join(f"[2026-11-27 10:00:0{i % 10}] INFO: decode batch {i}, #running-req: 4"
                   for i in range(12))


@pytest.mark.parametrize("death", DEATHS)
def test_a_cause_printed_well_before_the_death_names_it(sigs: SignatureSet, death: str) -> None:
    """A peer's socket timing out (a warning, no error word) twelve lines before the death."""
    got = events(sigs, f"""
[rank1]:[W1127 10:00:00.1 socket.cpp:485] [c10d] socket to node-0:2000 timed out after 1800000ms
{FILLER}
{death}
""")
    assert [e.category for e in got][:1] == ["interconnect_failure"]
    assert "timed out after" in got[0].excerpt[0]  # the cause is shown in the excerpt


@pytest.mark.parametrize("death", DEATHS)
def test_a_cause_printed_well_after_the_death_names_it(sigs: SignatureSet, death: str) -> None:
    """Servers print a child's death before its traceback is flushed: the cause still wins."""
    got = events(sigs, f"""
{death}
{FILLER}
[2026-11-27 10:00:09 TP0] RuntimeError: CUDA error: an illegal memory access was encountered
""")
    assert [(e.category, e.signature) for e in got][:1] == [("other", "cuda_fatal_error")]
    assert len(got) == 1


@pytest.mark.parametrize(("text", "category"), [
    # a serving stack's terminal start-up line, without any cause printed
    ("RuntimeError: API server process failed to start. See the stack trace above.",
     "startup_failure"),
    ("ERROR:    Application startup failed. Exiting.", "startup_failure"),
    ("2026-11-27T10:00:00Z ERROR text_generation_launcher: Shard 1 failed to initialize",
     "startup_failure"),
    ("ray.serve.exceptions.RayServeException: Deployment 'llm' failed to deploy",
     "startup_failure"),
    ("(ServeController pid=3) WARNING: Deployment 'llm' in application 'default' is "
     "DEPLOY_FAILED", "startup_failure"),
    ("Deploying app 'default' failed with exception:", "startup_failure"),
    ("Error: Unable to connect to the Python model shards: transport error: Connection refused "
     "(os error 111)", "startup_failure"),
    # a record at the level that means the process is going down
    ("(APIServer pid=1) CRITICAL 11-27 10:00:00 [launcher.py:1] the frobnicator gave up",
     "other"),
    ("CRITICAL:root:the frobnicator gave up", "other"),
    ('time=2026-11-27T10:00:00Z level=FATAL msg="frobnicator gave up"', "other"),
    # ggml's abort with its location, whatever the message after it
    ("/src/llama.cpp/ggml/src/ggml-cuda/mmq.cu:212: fatal error", "other"),
    # TGI's router losing its shard
    ("2026-11-27T10:00:00Z ERROR text_generation_router_v3::client: backends/v3/src/client/"
     "mod.rs:45: Server error: transport error", "engine_dead"),
    # HCCL's API calls and status names, init included
    ("[ERROR] HCCL(77): hcclCommInitRootInfo failed, return HCCL_E_TIMEOUT",
     "interconnect_failure"),
    ("[ERROR] 2026-11-27-10:00:00 HCCL init of the communicator failed: timed out",
     "interconnect_failure"),
    # a start-up line the family layer then names by its words: a compilation failed
    ("ERROR 11-27 10:00:00 [tpu_runner.py:1] Precompilation failed for num_tokens=128",
     "compile_failure"),
    ("ERROR 11-27 10:00:00 [launcher.py:1] Failed to start the engine, giving up",
     "startup_failure"),
    # TGI's launcher printing a dead shard's stderr: while shards were starting, start-up
    ("2026-11-27T10:00:00Z  INFO shard-manager: text_generation_launcher: Waiting for shard to be "
     "ready... rank=0\n2026-11-27T10:00:05Z ERROR shard-manager: text_generation_launcher: Shard "
     "complete standard error output:", "startup_failure"),
    # ROCm's device missing at start-up, even when the runner then aborts
    ("rocBLAS error: Could not initialize Tensile host: No devices found\nAborted (core dumped)",
     "startup_failure"),
])
def test_a_terminal_line_of_the_serving_stack_opens_an_event(
        sigs: SignatureSet, text: str, category: str) -> None:
    got = events(sigs, text)
    assert [e.category for e in got][:1] == [category]


def test_a_traceback_through_precompilation_is_a_start_up_failure(sigs: SignatureSet) -> None:
    frames = ("run_engine", "_precompile_backbone", "compile_step")
    got = events(sigs, bare_traceback("FrobnicateError: shape 4096 refused", frames))
    assert [e.category for e in got] == ["startup_failure"]


RUNNER_DIES = ('time=2026-11-27T10:00:09Z level=ERROR source=server.go:449 msg="llama runner '
               'terminated" error="exit status 2"\n'
               'Error: llama runner process has terminated: exit status 2')


@pytest.mark.parametrize(("before", "category"), [
    # still loading: the death is a start-up failure
    ('time=2026-11-27T10:00:01Z level=INFO source=server.go:600 msg="waiting for llama runner '
     'to start responding"\nllama_model_load: loading tensors', "startup_failure"),
    # the runner had started and answered: the death is the engine's
    ('time=2026-11-27T10:00:01Z level=INFO source=server.go:630 msg="llama runner started in '
     '3.2 seconds"\n[GIN] 2026/11/27 - 10:00:05 | 200 |  1.2s |  127.0.0.1 | POST "/api/chat"',
     "engine_dead"),
    ("", "engine_dead"),  # nothing says: the death stays a death
])
def test_a_death_while_the_model_loads_is_a_start_up_failure(
        sigs: SignatureSet, before: str, category: str) -> None:
    got = events(sigs, f"{before}\n{RUNNER_DIES}")
    assert [e.category for e in got][:1] == [category]


def test_a_handled_error_record_stays_silent(sigs: SignatureSet) -> None:
    """An ERROR the process survives is not a terminal line (only CRITICAL/FATAL are)."""
    got = events(sigs, """
(APIServer pid=1) ERROR 11-27 10:00:00 [serving_chat.py:1] Error in preprocessing prompt inputs
(APIServer pid=1) INFO:     127.0.0.1:50000 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request
(APIServer pid=1) INFO:     127.0.0.1:50002 - "POST /v1/chat/completions HTTP/1.1" 200 OK
""")
    assert got == []


@pytest.mark.parametrize("cause", [
    "[rank0]:[W1127 10:00:00 TCPStore.cpp:1] [c10d] recv from node-0:29500: Connection "
    "reset by peer",
    "[rank3]:[W1127 10:00:00 socket.cpp:1] [c10d] The client socket to node-0:29500 was "
    "closed by the remote peer",
])
def test_a_peer_lost_in_a_warning_is_the_cause_of_a_later_death(
        sigs: SignatureSet, cause: str) -> None:
    got = events(sigs, f"{cause}\n{FILLER}\n{DEATHS[3]}")
    assert [e.category for e in got][:1] == ["interconnect_failure"]


@pytest.mark.parametrize("statement", [
    "ggml_backend_metal_buffer_type_alloc_buffer: error: failed to allocate buffer, size = 1 MiB",
    "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory out of memory",
    "SYCL backend failed to allocate the KV cache: out of memory",
    "Level Zero: not enough memory for the compute buffer",
])
def test_other_backends_names_are_device_words(statement: str) -> None:
    """Metal, Vulkan, SYCL, Level Zero name a device as CUDA does: their allocator's refusal is
    device memory, not the host's (issue 51, tuned batch 8)."""
    found = families.family_of(statement, "")
    assert found is not None and found.name == "device_memory"
