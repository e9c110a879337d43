"""Realistic vLLM-on-TPU crash output for the simulator to write to its log file.

The lines follow a real tpu_inference HBM OOM: the engine core's traceback
ending in `RESOURCE_EXHAUSTED ... Ran out of memory in memory space hbm`,
then the API server's EngineDeadError and its shutdown, each with vLLM's
`(Process pid=N) LEVEL MM-DD HH:MM:SS [file:line]` prefix.
"""

from __future__ import annotations

import time

_ENGINE = "(EngineCore_DP0 pid={pid}) ERROR {ts} [core.py:710]"
_API = "(APIServer pid=1) ERROR {ts} [async_llm.py:480]"

HBM_OOM = [
    _ENGINE + " EngineCore encountered a fatal error.",
    _ENGINE + " Traceback (most recent call last):",
    _ENGINE + '   File "/workspace/vllm/vllm/v1/engine/core.py", line 701, in run_engine_core',
    _ENGINE + "     engine_core.run_busy_loop()",
    _ENGINE + '   File "/workspace/tpu_inference/tpu_inference/runner/tpu_runner.py", line 512, '
    "in execute_model",
    _ENGINE + "     return self._execute_model(scheduler_output)",
    _ENGINE + " jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. "
    "Ran out of memory in memory space hbm. Used 33.80G of 31.25G hbm. Exceeded hbm capacity "
    "by 2.55G.",
    _API + " AsyncLLM output_handler failed.",
    _API + " vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
    "See stack trace (above) for the root cause.",
    "(APIServer pid=1) INFO:     Shutting down",
    "(APIServer pid=1) INFO:     Finished server process [1]",
]

# An EngineCore failure that is not an OOM (a device fault in the engine core), after which
# the API server shuts down cleanly and the process exits with code 0 (vllm #48966), so a
# supervisor's "restart on failure" never fires.
ENGINE_DEAD_EXIT_0 = [
    _ENGINE + " EngineCore encountered a fatal error.",
    _ENGINE + " Traceback (most recent call last):",
    _ENGINE + '   File "/workspace/vllm/vllm/v1/engine/core.py", line 701, in run_engine_core',
    _ENGINE + "     engine_core.run_busy_loop()",
    _ENGINE + " RuntimeError: Worker failed with error 'device halted', please check the "
    "stack trace above for the root cause",
    _API + " AsyncLLM output_handler failed.",
    _API + " vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
    "See stack trace (above) for the root cause.",
    "(APIServer pid=1) INFO:     Shutting down",
    "(APIServer pid=1) INFO:     Finished server process [1]",
]

TPU_BUSY = [
    "(EngineCore_DP0 pid={pid}) ERROR {ts} [tpu_worker.py:88] RuntimeError: Unable to "
    "initialize backend 'tpu': ABORTED: The TPU is already in use by process with pid "
    "{holder}. Not attempting to load libtpu.so in this process.",
]


def render(lines: list[str], pid: int, holder: int = 0, now: float | None = None) -> list[str]:
    """The template lines with pid and a vLLM-style timestamp filled in."""
    ts = time.strftime("%m-%d %H:%M:%S", time.localtime(now if now is not None else time.time()))
    return [line.format(pid=pid, ts=ts, holder=holder) for line in lines]


_INFO = "(EngineCore_DP0 pid={pid}) INFO {ts}"


def start_lines(accelerator: str, warm: bool, pid: int, now: float | None = None) -> list[str]:
    """What a starting server prints: its platform, then a compile or a cache load (vLLM's
    own wording: torch.compile on a GPU, the XLA precompilation on a TPU)."""
    platform = "cuda" if accelerator == "gpu" else "tpu"
    lines = [f"INFO {{ts}} [__init__.py:244] Automatically detected platform {platform}."]
    if accelerator == "gpu" and warm:
        lines.append(_INFO + " [backends.py:161] Directly load the compiled graph(s) for "
                     "dynamic shape from the cache, took 3.912 s")
    elif accelerator == "gpu":
        lines += [_INFO + " [backends.py:508] Using cache directory: "
                  "/root/.cache/vllm/torch_compile_cache/3f1a/rank_0_0/backbone for vLLM's "
                  "torch.compile",
                  _INFO + " [backends.py:215] Compiling a graph for dynamic shape takes 41.27 s"]
    elif not warm:  # a warm TPU start compiles too, from cache hits: nothing new is written
        lines.append(_INFO + " [tpu_model_runner.py:1330] Compiling the model with different "
                     "input shapes.")
    return render(lines, pid, now=now)
