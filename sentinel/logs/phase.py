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
- *serving*: the server says it is ready or answers requests (vLLM's
  "Starting vLLM API server", Ollama's "llama runner started in", SGLang's
  "fired up and ready to roll", TGI's router "Connected", an access log line
  answered 200, vLLM's throughput record).

Issue 51's fourth round: "before the first request was served" holds for
what comes before the model is loaded too.

- A model being fetched is loading: a hub download, Ollama's pull (`pulling
  manifest`, `writing manifest`: `ollama run` loads the model right after
  it, and its CLI prints the runner's death then), and a warm-up run.
- An answer to a request that does not touch the model (Ollama's pull, show,
  tags, version) says nothing about the model being served.
- uvicorn's start-up lines and SGLang's batch records are no markers: they
  are printed before the server's own warm-up request too (SGLang's "fired
  up and ready to roll" comes after its warm-up's batches). vLLM's own ready
  line ("Starting vLLM API server") and the requests it answers still say
  "serving".
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_LOADING = re.compile(
    r"waiting for (?:llama runner|server) to (?:start|become available)|"
    r"llm server loading model|llama_model_load|llm_load_tensors|load_tensors:|"
    r"Loading model weights|Starting to load model|Loading safetensors|"
    r"Load weight begin|Init torch distributed|Memory profiling|"
    r"Capturing (?:CUDA graph|cudagraph)|(?i:captur(?:e|ing) (?:cuda |hip )?graphs?)|"
    r"Starting shard|Waiting for shard to be ready|"
    r"(?i:loading (?:the )?model)|"
    # the model fetched, then loaded: a hub download, Ollama's pull; a warm-up run
    r"pulling manifest|writing manifest|verifying sha256 digest|"
    r"(?i:\bdownloading\b|warm(?:ing)?[ _-]?up)"
)
_SERVING = re.compile(
    r"llama runner started in|"
    r"fired up and ready to roll|Serving revision|router/src/server\.rs:\d+: Connected|"
    r"\" 200\b|\| 200 \||Avg prompt throughput|"
    r"Starting vLLM API server|server is listening"
)
# Requests that do not touch the model (Ollama's pull, show, tags, version; a HEAD of /).
_NOT_THE_MODEL = re.compile(r'"/api/(?:pull|show|tags|version|ps|copy|delete|create|push|blobs)\b'
                            r'|HEAD +"/"')


def loading(lines: Sequence[str]) -> bool:
    """Whether the last phase marker among `lines` (oldest first) says "still loading".

    Read from the newest line back: the first marker found decides.
    """
    for line in reversed(lines):
        if _SERVING.search(line) and not _NOT_THE_MODEL.search(line):
            return False
        if _LOADING.search(line):
            return True
    return False
