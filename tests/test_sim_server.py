"""The simulator over real HTTP on loopback, as Sentinel (and curl) would see it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sentinel.sim import SimServer, start_sim
from sentinel.sim.metrics import GARBAGE_PAGE

MODEL = "google/gemma-4-26B-A4B-it"

GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:cache_config_info")
COUNTERS = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:num_preemptions",
            "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success")
HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
              "vllm:request_inference_time_seconds", "vllm:request_prefill_time_seconds",
              "vllm:request_decode_time_seconds", "vllm:request_prompt_tokens",
              "vllm:request_generation_tokens", "vllm:iteration_tokens_total",
              "vllm:request_params_n", "vllm:request_params_max_tokens")


@pytest.fixture
def sim() -> Iterator[SimServer]:
    server = start_sim(max_model_len=256)
    yield server
    server.stop()


@pytest.fixture
def client(sim: SimServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, timeout=5) as c:
        yield c


def scrape(client: httpx.Client) -> dict[str, object]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return {f.name: f for f in text_string_to_metric_families(response.text)}


def value(fams: dict[str, object], name: str, sample_name: str | None = None,
          **labels: str) -> float:
    for s in fams[name].samples:  # type: ignore[attr-defined]
        if s.name == (sample_name or name) and all(s.labels[k] == v for k, v in labels.items()):
            return float(s.value)
    raise AssertionError(f"no {sample_name or name} {labels}")


def chat(client: httpx.Client, content: str, **extra: object) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}
    return client.post("/v1/chat/completions", json=body)


def test_metrics_page_has_vllm_names_and_types(client: httpx.Client) -> None:
    fams = scrape(client)
    for name in GAUGES:
        assert fams[name].type == "gauge", name  # type: ignore[attr-defined]
    for name in COUNTERS:
        assert fams[name].type == "counter", name  # type: ignore[attr-defined]
        assert f"{name}_created" in fams  # prometheus_client's created series, as in vLLM
    for name in HISTOGRAMS:
        assert fams[name].type == "histogram", name  # type: ignore[attr-defined]
    assert "vllm:gpu_cache_usage_perc" not in fams
    assert value(fams, "vllm:kv_cache_usage_perc", model_name=MODEL, engine="0") == 0.0
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples}  # type: ignore[attr-defined]
    assert {"stop", "length", "abort"} <= reasons


def test_state_changes_show_in_metrics(sim: SimServer, client: httpx.Client) -> None:
    response = client.post("/sim/state", json={"kv_cache_usage": 0.93, "num_requests_waiting": 4,
                                               "num_requests_running": 2})
    assert response.status_code == 200 and response.json()["kv_cache_usage"] == 0.93
    fams = scrape(client)
    assert value(fams, "vllm:kv_cache_usage_perc") == 0.93
    assert value(fams, "vllm:num_requests_waiting") == 4
    assert value(fams, "vllm:num_requests_running") == 2
    assert client.get("/sim/state").json()["num_requests_waiting"] == 4
    assert sim.state.num_requests_running == 2


def test_control_api_rejects_bad_fields_and_keeps_state(client: httpx.Client) -> None:
    response = client.post("/sim/state", json={"kv_cache_usage": "high", "colour": "red"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert "kv_cache_usage: expected float" in error and "colour: unknown field" in error
    bad_json = client.post("/sim/state", content=b"{not json",
                           headers={"content-type": "application/json"})
    assert bad_json.status_code == 400 and "JSON" in bad_json.json()["error"]
    assert client.get("/sim/state").json()["kv_cache_usage"] == 0.0


def test_health_follows_state(sim: SimServer, client: httpx.Client) -> None:
    ok = client.get("/health")
    assert ok.status_code == 200 and ok.content == b""
    sim.set_state(healthy=False)
    dead = client.get("/health")
    assert dead.status_code == 503 and dead.content == b""
    assert chat(client, "hi").status_code == 500


def test_models_lists_model_with_max_model_len(client: httpx.Client) -> None:
    body = client.get("/v1/models").json()
    assert body["object"] == "list"
    card = body["data"][0]
    assert (card["id"], card["root"], card["owned_by"], card["max_model_len"]) == \
        (MODEL, MODEL, "vllm", 256)


def test_tokenize_prompt_and_messages(client: httpx.Client) -> None:
    plain = client.post("/tokenize", json={"model": MODEL, "prompt": "Hello, world!"}).json()
    assert plain["count"] == 5 and len(plain["tokens"]) == 5 and plain["max_model_len"] == 256
    messages = [{"role": "user", "content": "Hello, world!"}]
    as_chat = client.post("/tokenize", json={"model": MODEL, "messages": messages}).json()
    reply = chat(client, "Hello, world!").json()
    assert as_chat["count"] == reply["usage"]["prompt_tokens"]


def test_chat_non_streaming(client: httpx.Client) -> None:
    response = chat(client, "ping")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == "This is the Sentinel simulator. You said: ping"
    assert choice["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["completion_tokens"] == 10
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_chat_honours_max_tokens(client: httpx.Client) -> None:
    body = chat(client, "ping", max_tokens=3).json()
    assert body["choices"][0]["message"]["content"] == "This is the"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 3


def test_chat_streaming_sse_with_usage(client: httpx.Client) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "ping"}], "stream": True,
            "stream_options": {"include_usage": True}}
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: "):] for line in response.iter_lines() if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "This is the Sentinel simulator. You said: ping"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 10


def test_served_requests_drive_counters_and_histograms(client: httpx.Client) -> None:
    first = chat(client, "one two three").json()
    second = chat(client, "four", max_tokens=2).json()
    fams = scrape(client)
    prompt = first["usage"]["prompt_tokens"] + second["usage"]["prompt_tokens"]
    assert value(fams, "vllm:prompt_tokens", "vllm:prompt_tokens_total") == prompt
    assert value(fams, "vllm:generation_tokens", "vllm:generation_tokens_total") == 12 + 2
    assert value(fams, "vllm:request_success", "vllm:request_success_total",
                 finished_reason="length") == 1
    assert value(fams, "vllm:e2e_request_latency_seconds",
                 "vllm:e2e_request_latency_seconds_count") == 2
    assert value(fams, "vllm:inter_token_latency_seconds",
                 "vllm:inter_token_latency_seconds_count") == 11 + 1


def test_context_overflow_is_vllm_400(client: httpx.Client) -> None:
    words = " ".join(["word"] * 200)
    prompt_tokens = client.post("/tokenize", json={
        "messages": [{"role": "user", "content": words}]}).json()["count"]
    response = chat(client, words, max_tokens=100)
    assert response.status_code == 400
    assert response.json() == {"error": {
        "message": f"This model's maximum context length is 256 tokens. However, you requested "
                   f"100 output tokens and your prompt contains at least {prompt_tokens} input "
                   f"tokens, for a total of at least {prompt_tokens + 100} tokens. Please reduce "
                   f"the length of the input prompt or the number of requested output tokens. "
                   f"(parameter=input_tokens, value={prompt_tokens})",
        "type": "BadRequestError", "param": "input_tokens", "code": 400}}
    assert chat(client, words, max_tokens=256 - prompt_tokens).status_code == 200


def test_unknown_model_is_404(client: httpx.Client) -> None:
    response = chat(client, "x", model="other/model")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "The model `other/model` does not exist."


def test_down_closes_connections_but_control_answers(sim: SimServer,
                                                      client: httpx.Client) -> None:
    sim.set_state(down=True)
    with pytest.raises(httpx.RemoteProtocolError):
        client.get("/health")
    assert client.post("/sim/state", json={"down": False}).json()["down"] is False
    assert client.get("/health").status_code == 200


def test_garbage_metrics_page_does_not_parse(sim: SimServer, client: httpx.Client) -> None:
    sim.set_state(garbage_metrics=True)
    response = client.get("/metrics")
    assert response.status_code == 200 and response.content == GARBAGE_PAGE
    with pytest.raises(ValueError):
        list(text_string_to_metric_families(response.text))


def test_engines_give_one_series_per_engine() -> None:
    server = start_sim(engines=2)
    try:
        with httpx.Client(base_url=server.url, timeout=5) as c:
            server.set_state(num_requests_waiting=3)
            chat(c, "a")
            chat(c, "b")
            fams = scrape(c)
    finally:
        server.stop()
    assert {value(fams, "vllm:num_requests_waiting", engine=e) for e in ("0", "1")} == {3.0}
    for engine in ("0", "1"):  # round-robin: one request on each engine
        assert value(fams, "vllm:request_success", "vllm:request_success_total",
                     engine=engine, finished_reason="stop") == 1


def test_legacy_metrics_use_old_names() -> None:
    server = start_sim(legacy_metrics=True)
    try:
        with httpx.Client(base_url=server.url, timeout=5) as c:
            server.set_state(kv_cache_usage=0.5)
            fams = scrape(c)
    finally:
        server.stop()
    assert value(fams, "vllm:gpu_cache_usage_perc") == 0.5
    assert "vllm:kv_cache_usage_perc" not in fams
    assert fams["vllm:time_per_output_token_seconds"].type == "histogram"  # type: ignore[attr-defined]
    assert "vllm:gpu_prefix_cache_queries" in fams


def test_cli_prints_url_and_stops_on_sigterm() -> None:
    import signal
    import subprocess
    import sys

    code = "from sentinel.sim import serve_forever_cli; raise SystemExit(" \
           "serve_forever_cli('127.0.0.1', 0, max_model_len=512))"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{url}/v1/models", timeout=5).json()["data"][0]["max_model_len"] == 512
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
