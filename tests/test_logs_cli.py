"""`sentinel logs classify` as a subprocess: text, --json, stdin, unreadable files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "logs"


def sentinel(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "sentinel", "logs", "classify", *args],
                          input=stdin, capture_output=True, env=env, timeout=60, check=False)


def test_text_output_one_line_per_event() -> None:
    done = sentinel(str(DATA / "tpu_hbm_oom.log"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "hbm_oom xla_hbm_oom 13\n"


def test_healthy_log_exits_zero_with_no_output() -> None:
    done = sentinel(str(DATA / "healthy_tpu.log"))
    assert (done.returncode, done.stdout) == (0, b"")


def test_several_files_are_named_and_json_has_the_fields() -> None:
    a, b = str(DATA / "gpu_cuda_oom.log"), str(DATA / "healthy_gpu.log")
    assert sentinel(a, b).stdout.decode() == f"{a} cuda_oom cuda_oom 13\n"
    done = sentinel("--json", a, b)
    assert done.returncode == 0
    events = json.loads(done.stdout)
    assert len(events) == 1
    ev = events[0]
    assert {k: ev[k] for k in ("file", "line", "category", "signature", "severity")} == {
        "file": a, "line": 13, "category": "cuda_oom", "signature": "cuda_oom",
        "severity": "critical"}
    assert any("CUDA out of memory" in line for line in ev["excerpt"])


def test_stdin_with_invalid_utf8_and_binary_junk() -> None:
    log = (b"\xff\xfe\x00garbage\x80\x81\n" + bytes(range(256)) + b"\n"
           + (DATA / "gpu_cuda_oom.log").read_bytes())
    done = sentinel("--json", "-", stdin=log)
    assert done.returncode == 0, done.stderr
    events = json.loads(done.stdout)
    # bytes(range(256)) holds a newline, so the crash starts two lines later than in the file
    assert [(e["file"], e["line"], e["signature"]) for e in events] == [("-", 16, "cuda_oom")]


def test_empty_stdin_is_an_empty_json_array() -> None:
    done = sentinel("--json", "-", stdin=b"")
    assert (done.returncode, json.loads(done.stdout)) == (0, [])


def test_unreadable_file_exits_2_with_a_clear_message(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    done = sentinel(str(missing), str(DATA / "tpu_hbm_oom.log"))
    assert done.returncode == 2
    assert f"cannot read {missing}" in done.stderr.decode()
    assert b"xla_hbm_oom" in done.stdout  # the readable file was still classified


def test_invalid_signature_file_exits_3_as_for_a_config(tmp_path: Path) -> None:
    bad = tmp_path / "sig.yaml"
    bad.write_text("signatures:\n  - name: x\n    category: nope\n")
    done = sentinel("--signatures", str(bad), str(DATA / "healthy_tpu.log"))
    assert done.returncode == 3
    assert f"{bad}:3: signatures[0].category" in done.stderr.decode()


def test_a_v1_engine_death_through_an_unknown_kernel_is_an_event_named_after_its_cause() -> None:
    # The engine core's traceback (logged at ERROR) through a library no signature
    # knows, then the API server's output_handler failure: the CLI, like the daemon,
    # names the cause (the catch-all, at the exception's line), not the symptom.
    e = "(EngineCore_DP0 pid=236) ERROR 10-20 03:20:50 [core.py:710] "
    s = "(APIServer pid=1) ERROR 10-20 03:20:50 [async_llm.py:485] "
    log = "\n".join([
        f"{e}Traceback (most recent call last):",
        f'{e}  File "/usr/lib/python3.12/site-packages/quokka_kernels/ops.py", line 55, in moe',
        f"{e}    return torch.ops.quokka.fused_moe(x)",
        f"{e}RuntimeError: quokka fused_moe: invalid tile config 7",
        f"{s}AsyncLLM output_handler failed.",
        f"{s}Traceback (most recent call last):",
        f'{s}  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/async_llm.py", line 4, in h',
        f"{s}    outputs = await engine_core.get_output_async()",
        f"{s}EngineCore encountered an issue. See stack trace (above) for the root cause.",
    ]) + "\n"
    done = sentinel("-", stdin=log.encode())
    assert (done.returncode, done.stdout.decode()) == (0, "other unclassified_crash 4\n")


def test_line_numbers_hold_across_chunks_crlf_and_a_last_line_without_newline(
        tmp_path: Path) -> None:
    # The CLI reads 1 MiB at a time and makes entries only for lines it looks at:
    # a crash past the first chunk, CRLF endings and an unterminated last line
    # must keep their line numbers.
    healthy = '(APIServer pid=1) INFO:     10.0.0.7:5000 - "GET /health HTTP/1.1" 200 OK'
    oom = ("(EngineCore_DP0 pid=9) torch.OutOfMemoryError: CUDA out of memory. Tried to "
           "allocate 2.00 GiB. GPU 0 has a total capacity of 79.1 GiB")
    lines = [healthy] * 30_000 + [oom] + [healthy] * 20 + ["Killed process 9 (python) x"]
    path = tmp_path / "big.log"
    path.write_bytes("\r\n".join(lines).encode())
    assert path.stat().st_size > 2 << 20
    done = sentinel(str(path))
    assert done.stdout.decode().splitlines() == [
        "cuda_oom cuda_oom 30001", "host_oom_killed kernel_oom_kill 30022"]
