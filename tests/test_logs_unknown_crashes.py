"""Unknown crashes are caught by the catch-all; survivable warnings and handled errors are not.

The endings are generated: random exception class names and messages, random
signals and exit codes, inside realistic vLLM log prefixes. None of them is a
known signature's wording, so only the catch-all (`other`) can name them.
"""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest

from sentinel.logs import Classifier, SignatureSet, load_signature_file
from sentinel.logs.fatal import SETTLE_MS
from sentinel.model import LogEntry, LogEvent

ROOT = Path(__file__).resolve().parent.parent
WORDS = ("quantum", "flux", "ledger", "spindle", "harbor", "marble", "cobalt", "lantern",
         "orchid", "prism", "saddle", "tundra", "velvet", "walnut", "zephyr", "bramble")


@pytest.fixture(scope="module")
def sigs() -> SignatureSet:
    return load_signature_file(ROOT / "rules" / "signatures.yaml")


def exception_name(rng: random.Random) -> str:
    return "".join(rng.choice(WORDS).capitalize() for _ in range(2)) + rng.choice(
        ("Error", "Exception", "Failure"))


def message(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7)))


def ts(rng: random.Random) -> str:
    return f"{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:" \
           f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"


def serving(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        if rng.random() < 0.5:
            ip = f"10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}:{rng.randint(1024, 65535)}"
            out.append(f'(APIServer pid=1) INFO:     {ip} - "POST /v1/chat/completions HTTP/1.1" '
                       "200 OK")
        else:
            out.append(f"(APIServer pid=1) INFO {ts(rng)} [loggers.py:123] Engine 000: Avg "
                       f"prompt throughput: {rng.uniform(0, 9e3):.1f} tokens/s, Avg generation "
                       f"throughput: {rng.uniform(0, 9e3):.1f} tokens/s, Running: "
                       f"{rng.randint(0, 64)} reqs")
    return out


def frames(rng: random.Random, prefix: str) -> list[str]:
    out = []
    for _ in range(rng.randint(1, 4)):
        mod = rng.choice(WORDS)
        out += [f'{prefix}  File "/usr/local/lib/python3.12/dist-packages/vllm/{mod}.py", '
                f"line {rng.randint(1, 2000)}, in {rng.choice(WORDS)}",
                f"{prefix}    {rng.choice(WORDS)}({rng.choice(WORDS)})"]
    return out


def fatal_ending(rng: random.Random, kind: int) -> list[str]:
    """One unknown fatal ending, of five kinds, behind some healthy serving lines."""
    pid = rng.randint(100, 99_999)
    lines = serving(rng, rng.randint(2, 6))
    if kind == 0:  # an uncaught exception in the engine process; the log just stops
        p = f"(EngineCore_DP0 pid={pid}) "
        lines += [f"{p}Process EngineCore_DP0:", f"{p}Traceback (most recent call last):",
                  *frames(rng, p), f"{p}{exception_name(rng)}: {message(rng)}"]
    elif kind == 1:  # an uncaught exception in the API server, then the server shuts down
        p = "(APIServer pid=1) "
        lines += [f"{p}Traceback (most recent call last):", *frames(rng, p),
                  f"{p}{exception_name(rng)}: {message(rng)}", f"{p}INFO:     Shutting down"]
    elif kind == 2:  # a fatal signal inside a worker
        sig = rng.choice((signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE))
        p = f"(VllmWorker rank={rng.randint(0, 7)} pid={pid}) "
        lines += [f"{p}Fatal Python error: {signal.strsignal(sig)}", f"{p}",
                  f"{p}Current thread 0x{rng.getrandbits(48):012x} (most recent call first):",
                  f'{p}  File "/usr/local/lib/python3.12/dist-packages/vllm/{rng.choice(WORDS)}'
                  f'.py", line {rng.randint(1, 999)} in {rng.choice(WORDS)}']
    elif kind == 3:  # systemd reports the unit's main process killed by a signal
        sig = rng.choice([s for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGTERM)])
        host = f"Nov 22 10:{rng.randint(10, 59)}:{rng.randint(10, 59)} tpu-vm-{rng.randint(1, 9)}"
        lines += [f"{host} systemd[1]: vllm.service: Main process exited, code=killed, "
                  f"status={int(sig)}/{sig.name.removeprefix('SIG')}",
                  f"{host} systemd[1]: vllm.service: Failed with result 'signal'."]
    else:  # docker compose reports the container exiting non-zero (not 137: that is OOM)
        code = rng.choice([c for c in range(1, 256) if c != 137])
        lines += [f"vllm-{rng.randint(1, 4)} exited with code {code}"]
    return lines


def survivable(rng: random.Random, kind: int) -> list[str]:
    """A warning, hint or handled exception the process survives, with what follows it."""
    p = "(APIServer pid=1) "
    lines = serving(rng, rng.randint(1, 3))
    if kind == 0:  # a request failed; the server logs it and answers 400
        lines += [f"{p}ERROR {ts(rng)} [serving_chat.py:{rng.randint(100, 999)}] Error in "
                  f"preprocessing prompt inputs",
                  *[f"{p}ERROR {ts(rng)} [serving_chat.py:200] {x}" for x in
                    ["Traceback (most recent call last):", *frames(rng, ""),
                     f"{exception_name(rng)}: {message(rng)}"]],
                  f'{p}INFO:     10.0.0.{rng.randint(1, 254)}:5000 - "POST /v1/chat/completions '
                  f'HTTP/1.1" 400 Bad Request']
    elif kind == 1:  # a tool parser fails on one response; nothing follows
        lines += [f"{p}ERROR {ts(rng)} [hermes_tool_parser.py:157] Error in extracting tool call"
                  f" from response.",
                  *[f"{p}ERROR {ts(rng)} [hermes_tool_parser.py:157] {x}" for x in
                    ["Traceback (most recent call last):", *frames(rng, ""),
                     f"{exception_name(rng)}: {message(rng)}"]]]
    elif kind == 2:  # an exception in a background thread; the server carries on
        lines += [f"Exception in thread Thread-{rng.randint(1, 40)} ({rng.choice(WORDS)}):",
                  "Traceback (most recent call last):", *frames(rng, ""),
                  f"{exception_name(rng)}: {message(rng)}", *serving(rng, 2)]
    elif kind == 3:  # warnings and hints that read alarming
        lines += [
            f"(EngineCore_DP0 pid=7) WARNING {ts(rng)} [scheduler.py:1141] Sequence group "
            f"{rng.randint(1, 999)} is preempted by PreemptionMode.RECOMPUTE mode because there "
            f"is not enough KV cache space. total_num_cumulative_preemption={rng.randint(1, 99)}",
            f"(EngineCore_DP0 pid=7) INFO {ts(rng)} [shm_broadcast.py:466] No available shared "
            f"memory broadcast block found in 60 seconds. This typically happens when some "
            f"processes are hanging or doing some time-consuming work (e.g. compilation).",
            f"WARNING {ts(rng)} [{rng.choice(WORDS)}.py:{rng.randint(1, 999)}] "
            f"{exception_name(rng)} while {message(rng)}; retrying",
        ]
    else:  # an operator stops the server: KeyboardInterrupt, workers exit, exit code 0
        lines += ["^CTraceback (most recent call last):" if rng.random() < 0.5
                  else "Traceback (most recent call last):", *frames(rng, ""), "KeyboardInterrupt",
                  f"(VllmWorkerProcess pid={rng.randint(100, 9999)}) INFO {ts(rng)} "
                  f"multiproc_worker_utils.py:237] Worker exiting",
                  f"vllm-{rng.randint(1, 4)} exited with code 0"]
    return lines


def classify(sigs: SignatureSet, lines: list[str], batch: int) -> list[LogEvent]:
    c = Classifier(sigs)
    es = [LogEntry("t", "file:x", 1_000 + i, line, i + 1) for i, line in enumerate(lines)]
    out: list[LogEvent] = []
    for i in range(0, len(es), batch):
        out += c.feed_many(es[i:i + batch])
    return out + c.flush()


CASES = 20


@pytest.mark.parametrize("seed", range(CASES))
def test_a_random_unknown_fatal_ending_becomes_one_other_event(sigs: SignatureSet,
                                                               seed: int) -> None:
    rng = random.Random(seed)
    lines = fatal_ending(rng, seed % 5)
    for batch in (1, 5, 1000):
        events = classify(sigs, lines, batch)
        assert [e.category for e in events] == ["other"], (lines, events)
        assert lines[-1] in events[0].excerpt or lines[-2] in events[0].excerpt
    assert classify(sigs, lines, 1000)[0].signature in ("unclassified_crash", "native_crash")


@pytest.mark.parametrize("seed", range(CASES))
def test_a_random_survivable_warning_or_handled_error_is_no_event(sigs: SignatureSet,
                                                                   seed: int) -> None:
    rng = random.Random(1_000 + seed)
    lines = survivable(rng, seed % 5)
    for batch in (1, 5, 1000):
        assert classify(sigs, lines, batch) == [], lines


def test_an_undecided_traceback_waits_on_a_quiet_stream_then_is_decided(sigs: SignatureSet) -> None:
    # A bare traceback with nothing after it: a quiet poll shortly after keeps
    # waiting (a log line may still say the process lives on); after SETTLE_MS it is a crash.
    lines = ["(EngineCore_DP0 pid=5) Traceback (most recent call last):",
             '(EngineCore_DP0 pid=5)   File "/x.py", line 1, in f',
             "(EngineCore_DP0 pid=5) MarbleLedgerError: cobalt zephyr"]
    c = Classifier(sigs)
    assert c.feed_many([LogEntry("t", "s", 0, x, i) for i, x in enumerate(lines)], now_ms=0) == []
    assert c.flush(now_ms=SETTLE_MS // 2) == []
    events = c.flush(now_ms=SETTLE_MS)
    assert [(e.signature, e.line_no) for e in events] == [("unclassified_crash", 2)]
    # The same traceback followed in time by the process carrying on is no event.
    c = Classifier(sigs)
    assert c.feed_many([LogEntry("t", "s", 0, x, i) for i, x in enumerate(lines)], now_ms=0) == []
    assert c.flush(now_ms=100) == []
    alive = "(EngineCore_DP0 pid=5) INFO 01-01 00:00:01 [core.py:1] still serving"
    assert c.feed_many([LogEntry("t", "s", 200, alive, 3)], now_ms=200) == []
    assert c.flush(now_ms=10_000) == []


def test_root_cause_names_the_event_when_engine_death_follows(sigs: SignatureSet) -> None:
    # An OOM, then the engine-dead symptom on a plain line: one event, the OOM's.
    lines = [
        "(EngineCore_DP0 pid=9) ERROR 05-14 09:12:07 [core.py:710] torch.OutOfMemoryError: CUDA "
        "out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.1 GiB",
        "(EngineCore_DP0 pid=9) INFO 05-14 09:12:07 [core.py:1] shutting down",
        "(APIServer pid=1) ERROR 05-14 09:12:08 [core_client.py:564] Engine core proc "
        "EngineCore_DP0 died unexpectedly, shutting down client.",
        "(APIServer pid=1) INFO:     Shutting down",
    ]
    events = classify(sigs, lines, 1000)
    assert [(e.category, e.signature) for e in events] == [("cuda_oom", "cuda_oom")]
    assert lines[2] in events[0].excerpt


@pytest.mark.parametrize(("line", "category"), [
    ("vllm-1 exited with code 1", "other"),
    ("vllm-1 exited with code 143", None),  # SIGTERM: docker compose down
    ("vllm-1 exited with code 130", None),  # SIGINT: Ctrl+C
    ("vllm-1 exited with code 0", None),
    ("vllm-1 exited with code 137", "host_oom_killed"),
    ("INFO 01-01 00:00:00 [mp.py:1] Process VllmWorker-1 exitcode=-11", "other"),
    ("INFO 01-01 00:00:00 [mp.py:1] Process VllmWorker-1 exitcode=-15", None),
    ("Nov 22 10:00:00 vm systemd[1]: vllm.service: Main process exited, code=killed, "
     "status=11/SEGV", "other"),
    ("Nov 22 10:00:00 vm systemd[1]: vllm.service: Main process exited, code=killed, "
     "status=15/TERM", None),
    ("Nov 22 10:00:00 vm systemd[1]: vllm.service: Deactivated successfully.", None),
    ("INFO:jax._src.xla_bridge:Unable to initialize backend 'tpu': INTERNAL: Failed to open "
     "libtpu.so: libtpu.so: cannot open shared object file", None),  # JAX on a GPU host
    ("[W ProcessGroupGloo.cpp:715] Warning: Unable to resolve hostname to a (local) address. "
     "Using the loopback address as fallback.", None),
    ("INFO 01-01 00:00:00 [api_server.py:1] Health check failed: retrying in 5s", None),
])
def test_exit_codes_and_signals_that_are_a_stop_are_not_a_crash(sigs: SignatureSet, line: str,
                                                                category: str | None) -> None:
    events = classify(sigs, ["INFO 01-01 00:00:00 [x.py:1] before", line], 10)
    assert [e.category for e in events] == ([category] if category else [])


def test_killed_is_the_oom_killer_unless_vllm_was_stopping_its_own_workers(
        sigs: SignatureSet) -> None:
    loading = "INFO 11-20 10:45:57 gpu_executor.py:102] # GPU blocks: 12453, # CPU blocks: 2730"
    assert [e.category for e in classify(sigs, [loading, "Killed"], 10)] == ["host_oom_killed"]
    stopping = "INFO 07-19 11:07:56 multiproc_worker_utils.py:123] Killing local vLLM worker " \
               "processes"
    assert classify(sigs, [stopping, "INFO x", "Killed"], 10) == []
    assert classify(sigs, [stopping, "INFO x", "Killed"], 1) == []
    # The benign context only reaches back context_before (5) lines.
    far = [stopping, *[f"INFO 07-19 11:08:0{i} [x.py:1] serving" for i in range(6)], "Killed"]
    assert [e.category for e in classify(sigs, far, 10)] == ["host_oom_killed"]


def test_a_fatal_python_error_while_finalizing_is_not_a_crash(sigs: SignatureSet) -> None:
    at_exit = ("Fatal Python error: _enter_buffered_busy: could not acquire lock for "
               "<_io.BufferedWriter name='<stdout>'> at interpreter shutdown, possibly due to "
               "daemon threads")
    assert classify(sigs, [at_exit], 10) == []
    assert [e.signature for e in classify(sigs, ["Fatal Python error: Aborted"], 10)] == [
        "native_crash"]


def test_exclude_and_unless_after_are_validated() -> None:
    from sentinel.logs import SignatureFileError, parse_signatures
    text = """signatures:
  - name: x
    category: other
    severity: error
    patterns: ['Boom happened']
    exclude: ['(unclosed']
    unless_after: 'not a list'
    runbook: r
"""
    with pytest.raises(SignatureFileError) as err:
        parse_signatures(text, "s.yaml")
    problems = "\n".join(err.value.problems)
    assert "s.yaml:6: signatures[0].exclude[0]: invalid regular expression" in problems
    assert "signatures[0].unless_after: must be a list" in problems


def test_a_v0_worker_death_is_engine_death_unless_the_server_was_stopping(
        sigs: SignatureSet) -> None:
    died = ("ERROR 03-21 10:00:00 multiproc_worker_utils.py:116] Worker VllmWorkerProcess pid "
            "4242 died, exit code: -9")
    assert [e.category for e in classify(sigs, ["INFO serving", died], 10)] == ["engine_dead"]
    stopping = "INFO 03-21 09:59:59 multiproc_worker_utils.py:123] Killing local vLLM worker " \
               "processes"
    assert classify(sigs, [stopping, died], 10) == []


def test_a_bare_traceback_cut_off_at_the_end_of_the_log_is_a_crash(sigs: SignatureSet) -> None:
    # The process stopped while Python printed an uncaught exception (or the log ends
    # there): a crash. The same cut-off traceback logged by a logger is a handled error.
    bare = ["Process SpawnProcess-1:", "Traceback (most recent call last):",
            '  File "/usr/lib/python3.10/multiprocessing/process.py", line 314, in _bootstrap',
            "    self.run()"]
    events = classify(sigs, bare, 10)
    assert [(e.signature, e.line_no) for e in events] == [("unclassified_crash", 2)]
    logged = [f"ERROR 01-26 17:51:44 [api.py:1] {line}" for line in bare[1:]]
    assert classify(sigs, logged, 10) == []


def test_empty_polls_do_not_restart_the_quiet_timer(sigs: SignatureSet) -> None:
    # The daemon polls every 100 ms and hands each (mostly empty) batch to
    # feed_many before flush: silence after the crash's last line must still run out.
    lines = ["(EngineCore_DP0 pid=5) Traceback (most recent call last):",
             '(EngineCore_DP0 pid=5)   File "/x.py", line 1, in f',
             "(EngineCore_DP0 pid=5) MarbleLedgerError: cobalt zephyr"]
    c = Classifier(sigs)
    events = c.feed_many([LogEntry("t", "s", 0, x, i) for i, x in enumerate(lines)], now_ms=0)
    now = 0
    while not events and now < 5_000:
        now += 100
        events = c.feed_many([], now_ms=now) + c.flush(now_ms=now)
    assert [e.signature for e in events] == ["unclassified_crash"]
    assert now == SETTLE_MS  # timed from the last line, not from the last poll


E = "(EngineCore_DP0 pid=236) ERROR 10-20 03:20:50 [core.py:710] "
S = "(APIServer pid=1) ERROR 10-20 03:20:50 [async_llm.py:485] "


def engine_death(exception: str, *, header: bool = True, dead_class: bool = True) -> list[str]:
    """A V1 engine death: the engine core's traceback, then the API server's symptoms."""
    dead = "EngineDeadError: " if dead_class else ""
    return [
        '(APIServer pid=1) INFO:     10.0.0.7:5000 - "POST /v1/completions HTTP/1.1" 200 OK',
        *([f"{E}EngineCore encountered a fatal error."] if header else []),
        f"{E}Traceback (most recent call last):",
        f'{E}  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 701, in run',
        f"{E}    engine_core.run_busy_loop()",
        f'{E}  File "/usr/lib/python3.12/site-packages/quokka_kernels/ops.py", line 55, in moe',
        f"{E}    return torch.ops.quokka.fused_moe(x)",
        f"{E}{exception}",
        f"{S}AsyncLLM output_handler failed.",
        f"{S}Traceback (most recent call last):",
        f'{S}  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/async_llm.py", line 4, in h',
        f"{S}    outputs = await engine_core.get_output_async()",
        f"{S}{dead}EngineCore encountered an issue. See stack trace (above) for the root cause.",
    ]


@pytest.mark.parametrize("header", [True, False])
@pytest.mark.parametrize("dead_class", [True, False])
def test_a_v1_engine_death_through_an_unknown_kernel_is_named_after_its_cause(
        sigs: SignatureSet, header: bool, dead_class: bool) -> None:
    lines = engine_death("RuntimeError: quokka fused_moe: invalid tile config 7",
                         header=header, dead_class=dead_class)
    for batch in (1, 1000):
        events = classify(sigs, lines, batch)
        assert [(e.signature, e.category) for e in events] == [("unclassified_crash", "other")]
        assert events[0].line_no == lines.index(f"{E}RuntimeError: quokka fused_moe: invalid "
                                                "tile config 7") + 1
        assert f"{S}AsyncLLM output_handler failed." in events[0].excerpt  # the symptoms stay


@pytest.mark.parametrize(("exception", "category"), [
    ("AssertionError: num_computed_tokens 12 > num_tokens 8", "other"),
    ("RuntimeError: CUDA error: device-side assert triggered", "other"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
     "total capacity of 79.1 GiB", "cuda_oom"),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
     "allocate 7406166528 bytes.", "hbm_oom"),
])
def test_the_root_cause_names_an_engine_death_not_its_symptoms(
        sigs: SignatureSet, exception: str, category: str) -> None:
    events = classify(sigs, engine_death(exception), 1000)
    assert [e.category for e in events] == [category]
    assert any("EngineCore encountered an issue" in x for x in events[0].excerpt)


def test_an_engine_core_traceback_logged_on_its_way_out_then_silence_is_a_crash(
        sigs: SignatureSet) -> None:
    lines = engine_death("RuntimeError: quokka", header=False)[:7]  # up to the exception
    assert [e.signature for e in classify(sigs, lines, 1000)] == ["unclassified_crash"]
    # The same logged traceback in the API server (a request's handler caught it) is not.
    api = [x.replace(E, "(APIServer pid=1) ERROR 10-20 03:20:50 [serving.py:1] ") for x in lines]
    assert classify(sigs, api, 1000) == []


@pytest.mark.parametrize(("record", "crash"), [
    # logger.exception() through a plain formatter: the record's line, then the bare traceback
    ("ERROR [hermes_tool_parser.py:110] Error in extracting tool call from response.", False),
    ("WARNING 11-27 10:00:00 [cache.py:5] could not refresh the index; keeping the old one",
     False),
    # ... unless the record says the process is going down, or is CRITICAL, or the
    # process is the engine core, whose loop does not carry on after logging one
    ("ERROR 11-27 10:00:00 [server.py:9] Fatal error in the request loop, exiting", True),
    ("CRITICAL 11-27 10:00:00 [server.py:9] Unrecoverable state", True),
    ("(EngineCore_DP0 pid=5) ERROR 11-27 10:00:00 [core.py:9] Unexpected state in step", True),
    # no record before it: Python's default hook printed it, the program ended
    ("INFO 11-27 10:00:00 [server.py:9] request 7 started", True),
])
def test_a_traceback_logged_without_line_prefixes_is_judged_by_its_record(
        sigs: SignatureSet, record: str, crash: bool) -> None:
    lines = [record, "Traceback (most recent call last):",
             '  File "/srv/app/parse.py", line 88, in extract',
             "    json.loads(text)",
             "json.decoder.JSONDecodeError: Extra data: line 3 column 1 (char 527)"]
    got = [e.signature for e in classify(sigs, lines, 10)]
    assert got == (["unclassified_crash"] if crash else [])


def test_a_death_waits_on_a_quiet_stream_for_its_cause(sigs: SignatureSet) -> None:
    """SGLang prints its child's death before the scheduler's traceback is flushed.

    Followed live, the death's lines come in one poll and the cause in the next:
    a quiet poll in between must not close the event under the symptom's name;
    after SETTLE_MS of silence it closes (as a death when no cause came).
    """
    death = "[2026-11-27 10:00:09] Received sigquit from a child process. It usually means..."
    cause = "[2026-11-27 10:00:09 TP0] RuntimeError: CUDA error: an illegal memory access"
    c = Classifier(sigs)
    assert c.feed_many([LogEntry("t", "s", 0, death, 1)], now_ms=0) == []
    assert c.feed_many([], now_ms=300) + c.flush(now_ms=300) == []
    assert c.feed_many([LogEntry("t", "s", 400, cause, 2)], now_ms=400) == []
    events = c.flush(now_ms=400 + SETTLE_MS)
    assert [(e.category, e.signature) for e in events] == [("other", "cuda_fatal_error")]
    # no cause at all: the death alone is reported once the settle time has passed
    c = Classifier(sigs)
    assert c.feed_many([LogEntry("t", "s", 0, death, 1)], now_ms=0) == []
    assert c.flush(now_ms=SETTLE_MS // 2) == []
    assert [e.category for e in c.flush(now_ms=SETTLE_MS)] == ["engine_dead"]
