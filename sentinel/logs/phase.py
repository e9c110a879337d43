"""Was the server ever serving? The phase a death happened in, read from the log.

An engine (or runner, or shard) that dies while the server is still loading
its model is a start-up failure, not the death of a serving engine: the
operator's question is "why does it not come up", and no request was lost.
The signatures of a death cannot tell the two apart (Ollama's runner prints
the same `exit status 2` either way), so the lines before the death say it:
the last phase marker wins.

- *loading*: the server says it is loading or warming up (Ollama's "waiting
  for llama runner to start responding" and its `llm server loading model`
  status, llama.cpp's loader, vLLM's weight loading and memory profiling,
  SGLang's "Load weight begin", TGI's "Starting shard" / "Waiting for shard");
- *serving*: the server says it is ready or answers requests (uvicorn's
  "Application startup complete", Ollama's "llama runner started in",
  SGLang's "fired up and ready to roll", TGI's router "Connected", an access
  log line, a batch or throughput record).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_LOADING = re.compile(
    r"waiting for (?:llama runner|server) to (?:start|become available)|"
    r"llm server loading model|llama_model_load|llm_load_tensors|load_tensors:|"
    r"Loading model weights|Starting to load model|Loading safetensors|"
    r"Load weight begin|Init torch distributed|Memory profiling|"
    r"Capturing (?:CUDA graph|cudagraph)|(?i:capture (?:cuda |hip )?graph)|"
    r"Starting shard|Waiting for shard to be ready|"
    r"(?i:loading (?:the )?model)"
)
_SERVING = re.compile(
    r"Application startup complete|Uvicorn running on|llama runner started in|"
    r"fired up and ready to roll|Serving revision|router/src/server\.rs:\d+: Connected|"
    r"\" 200\b|\| 200 \||Avg prompt throughput|Decode batch|Prefill batch|"
    r"Starting vLLM API server|server is listening"
)


def loading(lines: Iterable[str]) -> bool:
    """Whether the last phase marker among `lines` (oldest first) says "still loading"."""
    last: bool | None = None
    for line in lines:
        if _SERVING.search(line):
            last = False
        elif _LOADING.search(line):
            last = True
    return bool(last)
