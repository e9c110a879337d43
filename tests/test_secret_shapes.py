"""Redaction by shape: credentials in URLs of any host, token shapes, high-entropy values
beside credential words; and ordinary vLLM log lines that must come through intact."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from sentinel.secretpatterns import PromptRedactor, redact_credentials, token_like
from sentinel.secrets import REDACTED, install_redaction

LOGS = Path(__file__).parent / "data" / "logs"

TOKEN = "Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lm"


@pytest.mark.parametrize(("text", "secret", "kept"), [
    # URLs of hosts nobody listed: the path segment that is a token.
    (f"POST https://chat.selfhosted.example/hooks/{TOKEN} failed: 502", TOKEN,
     "https://chat.selfhosted.example/hooks/<redacted> failed: 502"),
    ("POST https://mm.corp.example/api/v4/x7k2m9p4q8r1s5t3u6v0w2y4z6 failed",
     "x7k2m9p4q8r1s5t3u6v0w2y4z6", "https://mm.corp.example/api/v4/<redacted>"),
    # After a `hooks`-like segment every segment goes, hex or short.
    ("https://rc.example/hooks/5f1a2b3c/9f8e7d6c5b4a3928", "9f8e7d6c5b4a3928",
     "https://rc.example/hooks/<redacted>/<redacted>"),
    # Query values: named like a credential, or token-like under any name.
    ("GET http://10.1.2.3:8080/x?token=9f8e7d6c5b4a39281706&x=1", "9f8e7d6c5b4a39281706",
     "?token=<redacted>&x=1"),
    (f"GET https://api.example/v1/q?q={TOKEN}&page=2", TOKEN, "?q=<redacted>&page=2"),
    ("https://s3.example/b/o?X-Amz-Credential=AKIAABCDEFGHIJKLMNOP%2F20260101",
     "AKIAABCDEFGHIJKLMNOP", "X-Amz-Credential=<redacted>"),
    (f"https://app.example/cb#access_token={TOKEN}&state=1", TOKEN,
     "#access_token=<redacted>&state=1"),
    # Userinfo: a password, or a token standing as the user.
    ("redis://default:s3cretpass@cache.internal:6379/0", "s3cretpass",
     "redis://default:<redacted>@cache.internal"),
    ("git clone https://ghx1234567890abcdefghij@git.example/org/r.git",
     "ghx1234567890abcdefghij", "https://<redacted>@git.example/org/r.git"),
    # Beside credential words, in log lines.
    (f"(APIServer pid=1) INFO token={TOKEN} loaded", TOKEN, "token=<redacted> loaded"),
    ("WARN HF_TOKEN=9f8e7d6c5b4a39281706f5e4d3c2b1a0", "9f8e7d6c5b4a39281706f5e4d3c2b1a0",
     "HF_TOKEN=<redacted>"),
    ('{"api_key": "q8W2e4R6t8Y0u2I4"}', "q8W2e4R6t8Y0u2I4", '"api_key": "<redacted>"'),
    ("x-api-key: 0123abcd4567efgh", "0123abcd4567efgh", "x-api-key: <redacted>"),
    ("db.password = hunter2", "hunter2", "db.password = <redacted>"),
    (f"rejected: invalid token {TOKEN}", TOKEN, "invalid token <redacted>"),
    (f"the api key is {TOKEN}", TOKEN, "api key is <redacted>"),
    # Shapes with a prefix.
    ("OPENAI key sk-proj-abcdefghijklmnopqrstuvwxyz0123", "abcdefghijklmnopqrstuvwxyz0123",
     "OPENAI key <redacted>"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
     "eyJzdWIiOiIxMjM0NTY3ODkwIn0", "jwt <redacted>"),
    ("GITLAB glpat-AbCdEfGhIjKlMnOpQrSt1234", "glpat-AbCdEfGhIjKlMnOpQrSt1234", "GITLAB "),
])
def test_credentials_by_shape_are_redacted(text, secret, kept):
    out = PromptRedactor().redact(text)
    assert secret not in out, out
    assert REDACTED in out and kept in out, out


# What vLLM and its neighbours write every day; none of it may change.
NORMAL = [
    "INFO 05-12 10:00:01 [engine.py:123] Loading weights from "
    "/models/gemma-4/model-00001-of-00004.safetensors",
    "Initializing a V1 LLM engine (v0.11.0) with config: model='google/gemma-4-26B-A4B-it', "
    "speculative_config=None, tokenizer='google/gemma-4-26B-A4B-it', skip_tokenizer_init=False,"
    " tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
    "dtype=torch.bfloat16, max_seq_len=8192, download_dir=None, load_format=auto, "
    "max_num_batched_tokens=8192, seed=0",
    'INFO:     127.0.0.1:53210 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "Received request chatcmpl-3f2a9c1e8b7d4f60a1b2c3d4e5f60718: prompt: 'hi', "
    "params: SamplingParams(n=1, temperature=0.0, max_tokens=512)",
    "Finished request cmpl-9b1f0e2d3c4a5b6c7d8e9f00112233445566-0",
    "request_id=3f2a9c1e8b7d4f60a1b2c3d4e5f60718 trace_id=4bf92f3577b34da6a3ce929d0e0e4736",
    "Downloading https://huggingface.co/google/gemma-4-26B-A4B-it/resolve/"
    "3f2a9c1e8b7d4f60a1b2c3d4e5f607181234abcd/config.json",
    "https://huggingface.co/meta-llama/Meta-Llama-3.1-70B-Instruct-FP8-dynamic/resolve/main/"
    "tokenizer.json",
    "Using PreTrainedTokenizerFast; cache key=prefix_cache",
    "Engine 000: Avg prompt throughput: 1023.4 tokens/s, Avg generation throughput: 88.1 "
    "tokens/s, Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 33.1%, "
    "Prefix cache hit rate: 45.2%",
    "Compiling the XLA graph for num_tokens=128 max_num_reqs=256 (cache dir "
    "/var/cache/vllm/xla_cache/7f3e2a1b9c8d)",
    "sha256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "Available routes: /v1/models, /v1/chat/completions, /tokenize, /health, /metrics",
    "Graph capturing finished in 12 secs, took 0.53 GiB; token budget 8192",
    "KeyError: 'model.layers.0.self_attn.qkv_proj.weight' at key=layers.0",
    "auth=none mode=offline api_key=EMPTY",
    "password=${DB_PASSWORD} secret: null token: None",
    "Loaded tokenizer from /root/.cache/huggingface/hub/models--google--gemma-4-26B-A4B-it/"
    "snapshots/0123456789abcdef0123456789abcdef01234567",
]


@pytest.mark.parametrize("line", NORMAL)
def test_normal_log_lines_stay_intact(line):
    assert PromptRedactor().redact(line) == line


def test_shipped_sample_logs_stay_intact():
    lines = [ln for f in sorted(LOGS.glob("*.log")) for ln in f.read_text().splitlines()]
    assert len(lines) > 100
    assert [redact_credentials(ln) for ln in lines] == lines


@pytest.mark.parametrize(("text", "expected"), [
    (TOKEN, True), ("x7k2m9p4q8r1s5t3u6v0w2y4z6", True), ("abcdefghijklmnopqrstuvwx", True),
    ("9f8e7d6c5b4a39281706f5e4d3c2b1a0", False),  # hex: an id or a hash
    ("123456789012345678", False), ("gemma-4-26B-A4B-it", False),
    ("PreTrainedTokenizerFast", False), ("internationalization", False),
    ("model-00001-of-00004.safetensors", False), ("short1A", False),
])
def test_token_like(text, expected):
    assert token_like(text) is expected


def test_the_daemon_log_filter_redacts_shapes(caplog):
    logger = logging.getLogger("sentinel.test.shapes")
    handler = logging.Handler()
    seen: list[str] = []
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        install_redaction(PromptRedactor(["config-secret-xyz"]), logger)
        logger.warning("crash line: %s", f"POST https://chat.example/hooks/{TOKEN} failed")
        logger.warning("and config-secret-xyz")
    finally:
        logger.removeHandler(handler)
    assert seen == ["crash line: POST https://chat.example/hooks/<redacted> failed",
                    "and <redacted>"]


@pytest.mark.parametrize("unit", ["a.", "token=", "https://a/", "a" * 15 + "-", "key: x"])
def test_redaction_is_linear_on_hostile_lines(unit):
    def run(n: int) -> float:  # CPU time of this thread: a busy machine does not count
        text = unit * (n // len(unit))
        start = time.thread_time()
        PromptRedactor().redact(text)
        return time.thread_time() - start
    small, big = min(run(50_000) for _ in range(3)), min(run(200_000) for _ in range(3))
    # 4x the text, about 4x the time (quadratic: 16x); tiny times are timer noise.
    assert big < 0.05 or big / small < 8, (small, big)
    assert big < 2.0
