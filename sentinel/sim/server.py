"""`sentinel sim`: an HTTP server that answers like vLLM's OpenAI-compatible server.

vLLM paths: GET /health, /metrics, /v1/models, /version; POST /tokenize,
/v1/chat/completions. Control paths (always answered, even when "down"):
GET/POST /sim/state. Standard library only (ThreadingHTTPServer), so a test
or the demo starts one in a background thread with `start_sim()`.
"""

from __future__ import annotations

import itertools
import json
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sentinel.sim import openai_api, structured, tokens
from sentinel.sim.metrics import CONTENT_TYPE, GARBAGE_PAGE, ServedRequest, VllmMetrics
from sentinel.sim.openai_api import ApiError, ChatRequest
from sentinel.sim.state import SimState, SimStateError, apply_update
from sentinel.sim.traffic import Traffic

DEFAULT_MODEL = "google/gemma-4-26B-A4B-it"
DEFAULT_MAX_MODEL_LEN = 16384
MAX_BODY_BYTES = 8 * 1024 * 1024
# How long a chat request hangs under the "timeout" fault (or until the server stops).
CHAT_TIMEOUT_S = 30.0
KEPT_CHAT_REQUESTS = 100


@dataclass(frozen=True)
class SimConfig:
    """What a simulated server serves; fixed for its lifetime."""

    model: str = DEFAULT_MODEL
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    engines: int = 1
    legacy_metrics: bool = False
    verbose: bool = False
    # The traffic generator (`load_rps`) runs in real time; tests that drive
    # their own clock turn it off and call `SimServer.traffic.advance` instead.
    auto_traffic: bool = True


class _QuietServer(ThreadingHTTPServer):
    """ThreadingHTTPServer without a traceback on stderr for every dropped client."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if self.sim.config.verbose:  # type: ignore[attr-defined]
            super().handle_error(request, client_address)


class SimServer:
    """A running simulated vLLM server: `url`, `state`, `set_state(**fields)`, `stop()`."""

    def __init__(self, config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config
        self.metrics = VllmMetrics(config.model, config.max_model_len, config.engines,
                                   legacy=config.legacy_metrics)
        self.created = int(time.time())
        self._lock = threading.Lock()
        self._state = SimState()
        self._next_engine = itertools.cycle(range(config.engines))
        self.metrics.set_state(self._state)
        self._httpd = _QuietServer((host, port), _Handler)
        self._httpd.sim = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # The bodies of the latest chat requests, so tests can see what a client sent.
        self.chat_requests: deque[object] = deque(maxlen=KEPT_CHAT_REQUESTS)
        self.container: Any = None  # a sim.container.SimContainer, for crashes and restarts
        self.traffic = Traffic(self.metrics, lambda: self.state, config.engines)
        self.chat_now = 0
        self.chat_started = 0
        self.chat_max_in_flight = 0
        self._chat_moved = threading.Condition(self._lock)
        # Chat requests in flight at some moment while each /health request was being
        # answered: a client that sends its health check and canary together shows 1 here,
        # one after the other 0. Scheduling alone can delay a canary sent together past a
        # short latency, so a test may hold /health (up to this long) until a chat request
        # has arrived: then 1 is an event it waits for, not a race it may lose.
        self.chat_beside_health: deque[int] = deque(maxlen=KEPT_CHAT_REQUESTS)
        self.health_waits_for_chat_s = 0.0

    @property
    def host(self) -> str:
        """The address the server listens on."""
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        """The port the server listens on (the real one when started with port 0)."""
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:8000 (no trailing slash)."""
        return f"http://{self.host}:{self.port}"

    @property
    def model(self) -> str:
        """The served model name."""
        return self.config.model

    @property
    def max_model_len(self) -> int:
        """The context length the server enforces and reports."""
        return self.config.max_model_len

    @property
    def state(self) -> SimState:
        """The current injected state."""
        with self._lock:
            return self._state

    def set_state(self, **fields: Any) -> SimState:
        """Change some state fields (others unchanged); raises SimStateError on bad input."""
        return self.update_state(fields)

    def update_state(self, update: object) -> SimState:
        """Apply a JSON-object update (as POST /sim/state does) and return the new state."""
        with self._lock:
            self._state = apply_update(self._state, update)
            self.metrics.set_state(self._state)
            return self._state

    def take_chat_fault(self) -> str:
        """The fault this chat request meets ("" for none), counting down `chat_fault_count`."""
        with self._lock:
            state = self._state
            if state.chat_fault and state.chat_fault_count > 0:
                left = state.chat_fault_count - 1
                self._state = apply_update(state, {"chat_fault_count": left,
                                                   **({"chat_fault": ""} if not left else {})})
            return state.chat_fault

    def chat_in_flight(self, delta: int) -> None:
        """Count chat requests being answered; `chat_max_in_flight` keeps the peak."""
        with self._chat_moved:
            self.chat_now += delta
            self.chat_started += max(delta, 0)
            self.chat_max_in_flight = max(self.chat_max_in_flight, self.chat_now)
            self._chat_moved.notify_all()

    def chat_mark(self) -> tuple[int, int]:
        """(in flight, started so far): taken as a /health request arrives."""
        with self._lock:
            return self.chat_now, self.chat_started

    def note_chat_beside_health(self, mark: tuple[int, int]) -> None:
        """Count the chat requests that overlapped a /health request begun at `mark`
        (in flight then, or started since), after holding for one if asked to."""
        def overlapping() -> int:
            return mark[0] + self.chat_started - mark[1]
        with self._chat_moved:
            self._chat_moved.wait_for(lambda: overlapping() > 0, self.health_waits_for_chat_s)
            self.chat_beside_health.append(overlapping())

    def pick_engine(self) -> int:
        """The engine the next request lands on (round-robin, as DP load balancing spreads)."""
        with self._lock:
            return next(self._next_engine)

    def start(self) -> SimServer:
        """Serve in a background daemon thread; returns self."""
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name=f"sentinel-sim-{self.port}", daemon=True)
        self._thread.start()
        if self.config.auto_traffic:
            self.traffic.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until `stop()` is called from another."""
        self._httpd.serve_forever(poll_interval=0.2)

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        self._stopping.set()
        self.traffic.stop()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


SIM_VLLM_VERSION = "0.11.0"  # the release whose metric names the simulator serves


def start_sim(host: str = "127.0.0.1", port: int = 0, model: str = DEFAULT_MODEL,
              max_model_len: int = DEFAULT_MAX_MODEL_LEN, engines: int = 1,
              legacy_metrics: bool = False, verbose: bool = False,
              auto_traffic: bool = True) -> SimServer:
    """Start a simulated vLLM server in a background thread and return it."""
    config = SimConfig(model, max_model_len, engines, legacy_metrics, verbose, auto_traffic)
    return SimServer(config, host, port).start()


def serve_forever_cli(host: str, port: int, model: str = DEFAULT_MODEL,
                      max_model_len: int = DEFAULT_MAX_MODEL_LEN, engines: int = 1,
                      docker_socket: str | None = None, container: Any = None) -> int:
    """Run `sentinel sim` in the foreground until SIGTERM or Ctrl-C; returns the exit code.

    With `docker_socket`, the server is also a container (`container`, a
    ContainerSpec) that a Docker-API client can stop and start there.
    """
    server = start_sim(host, port, model, max_model_len, engines)
    socket_server = None
    if docker_socket:
        from sentinel.sim.container import ContainerSpec
        from sentinel.sim.docker_socket import serve_container

        socket_server = serve_container(server, container or ContainerSpec(), docker_socket)
        print(f"sentinel sim: Docker API for container {server.container.spec.name} at "
              f"unix://{docker_socket}", flush=True)
    stopping = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: stopping.set())
    print(f"sentinel sim serving {model} at {server.url}", flush=True)
    try:
        stopping.wait()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        if socket_server is not None:
            socket_server.stop()
        server.stop()
    return 0


class _Handler(BaseHTTPRequestHandler):
    """Routes one HTTP request to the simulator; one instance per connection."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    @property
    def sim(self) -> SimServer:
        return self.server.sim  # type: ignore[attr-defined,no-any-return]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if self.sim.config.verbose:
            sys.stderr.write(f"sim {self.address_string()} {format % args}\n")

    # -- dispatch ---------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/sim/state":
            self._control(method)
            return
        if path == "/sim/crash" and method == "POST":
            self._crash()
            return
        state = self.sim.state
        if state.down:
            # A hung or dead process: the connection closes with no answer.
            self.close_connection = True
            return
        routes = _GET_ROUTES if method == "GET" else _POST_ROUTES
        other = _POST_ROUTES if method == "GET" else _GET_ROUTES
        handler = routes.get(path)
        if handler is None:
            status = HTTPStatus.METHOD_NOT_ALLOWED if path in other else HTTPStatus.NOT_FOUND
            self._discard_body()
            self._send_json(status, {"detail": status.phrase})
            return
        try:
            handler(self, state)
        except ApiError as exc:
            self._send_json(exc.status, exc.body())

    # -- plumbing ---------------------------------------------------------

    def _discard_body(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if 0 < length <= MAX_BODY_BYTES:
            self.rfile.read(length)

    def _read_json(self) -> object:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise ApiError(HTTPStatus.BAD_REQUEST, f"request body over {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"JSON decode error: {exc}") from exc

    def _send(self, status: HTTPStatus, body: bytes, content_type: str | None) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, status: HTTPStatus, payload: object) -> None:
        self._send(status, json.dumps(payload, separators=(",", ":")).encode(), "application/json")

    def _start_stream(self) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _write_event(self, data: str) -> None:
        payload = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(payload):X}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # -- control API ------------------------------------------------------

    def _control(self, method: str) -> None:
        if method == "GET":
            self._send_json(HTTPStatus.OK, self.sim.state.to_json())
            return
        try:
            new = self.sim.update_state(self._read_json())
        except (SimStateError, ApiError) as exc:
            message = exc.message if isinstance(exc, ApiError) else str(exc)
            self._send_json(HTTPStatus.BAD_REQUEST, {"error": message})
            return
        self._send_json(HTTPStatus.OK, new.to_json())

    def _crash(self) -> None:
        """POST /sim/crash {"mode": "down|unhealthy|engine_dead", "log": true} (a container)."""
        try:
            body = self._read_json()
            if not isinstance(body, dict):
                raise ApiError(HTTPStatus.BAD_REQUEST, "expected a JSON object")
            if self.sim.container is None:
                raise ApiError(HTTPStatus.CONFLICT, "no container: start with --docker-socket")
            self.sim.container.crash(str(body.get("mode", "down")), bool(body.get("log", True)))
        except (ApiError, ValueError) as exc:
            message = exc.message if isinstance(exc, ApiError) else str(exc)
            self._send_json(HTTPStatus.BAD_REQUEST, {"error": message})
            return
        self._send_json(HTTPStatus.OK, self.sim.state.to_json())

    # -- vLLM API ---------------------------------------------------------

    def _health(self, state: SimState) -> None:
        mark = self.sim.chat_mark()
        time.sleep(state.latency_s)
        self.sim.note_chat_beside_health(mark)
        # vLLM answers 200 with an empty body, and 503 once the engine is dead.
        self._send(HTTPStatus.OK if state.healthy else HTTPStatus.SERVICE_UNAVAILABLE, b"", None)

    def _metrics(self, state: SimState) -> None:
        time.sleep(state.latency_s)
        body = GARBAGE_PAGE if state.garbage_metrics else self.sim.metrics.render()
        self._send(HTTPStatus.OK, body, CONTENT_TYPE)

    def _models(self, state: SimState) -> None:
        time.sleep(state.latency_s)
        config = self.sim.config
        self._send_json(HTTPStatus.OK, openai_api.models_payload(
            config.model, config.max_model_len, self.sim.created))

    def _version(self, state: SimState) -> None:
        """GET /version: vLLM answers `{"version": "0.11.0"}` (`sentinel init` reads it)."""
        time.sleep(state.latency_s)
        self._send_json(HTTPStatus.OK, {"version": SIM_VLLM_VERSION})

    def _tokenize(self, state: SimState) -> None:
        config = self.sim.config
        body = self._read_json()
        if state.model_dialect in ("llamacpp", "tgi", "ollama"):
            raise ApiError(HTTPStatus.NOT_FOUND, "Not Found")  # vLLM's route only
        time.sleep(state.latency_s)
        self._send_json(HTTPStatus.OK, openai_api.tokenize(body, config.model,
                                                           config.max_model_len))

    def _chat(self, state: SimState) -> None:
        self._answering = True
        self.sim.chat_in_flight(+1)
        try:
            self._chat_answer(state)
        finally:
            self._answer_ending()

    def _answer_ending(self) -> None:
        """Count the request out of flight, once: called just before its last bytes go out.

        Not after: a client that has read the end may send its next request before this
        thread runs again, and the peak would count a request that is already over.
        """
        if getattr(self, "_answering", False):
            self._answering = False
            self.sim.chat_in_flight(-1)

    def _chat_answer(self, state: SimState) -> None:
        config = self.sim.config
        started = time.monotonic()
        body = self._read_json()
        req = openai_api.parse_chat(body, config.model)
        self.sim.chat_requests.append(body)  # refused ones too: tests see what was asked
        schema = structured.requested_schema(body, state.model_dialect)  # type: ignore[arg-type]
        if not state.healthy:
            raise openai_api.engine_dead_error()
        if state.sleeping:
            raise openai_api.engine_sleeping_error()
        prompt_tokens = tokens.count_chat(req.messages)
        openai_api.check_context(prompt_tokens, req.max_tokens, config.max_model_len)
        fault = self.sim.take_chat_fault()
        _raise_fault(fault, self.sim)
        # The injected latency stands for time spent waiting in the scheduler queue.
        time.sleep(state.latency_s)
        if state.stalled:
            self._hang(req.stream)
            return
        queued = time.monotonic()
        time.sleep(state.ttft_s)  # counted as prefill: the first token comes this much later
        if schema is not None or fault == "invalid_json":
            room = config.max_model_len - prompt_tokens
            deltas, finish = structured.plan_answer(
                None if fault == "invalid_json" else schema, req.max_tokens, room)
        else:
            deltas, finish = openai_api.plan_reply(req, prompt_tokens, config.max_model_len)
        if state.garbage_output:
            deltas = [""] * len(deltas)  # tokens were generated, but no text came of them
        emit = _ChatEmitter(self, req, config.model, prompt_tokens,
                            truncate=fault == "truncated_stream")
        stamps = list(emit.run(deltas, finish))
        cached = int(prompt_tokens * state.prefix_cache_hit_rate)
        first = stamps[0] if stamps else time.monotonic()
        self.sim.metrics.observe(ServedRequest(
            engine=self.sim.pick_engine(), prompt_tokens=prompt_tokens,
            generation_tokens=len(deltas), cached_tokens=cached, max_tokens=req.max_tokens,
            n=req.n, finished_reason=finish, queue_s=queued - started,
            prefill_s=first - queued,
            token_gaps_s=tuple(b - a for a, b in itertools.pairwise(stamps)),
            e2e_s=time.monotonic() - started))

    def _hang(self, stream: bool) -> None:
        """A stalled engine: accept the request, then never produce a token.

        A stream gets its 200 and headers (the front end is alive) and nothing
        more; either way the connection closes without an answer once the stall
        clears, the server stops, or CHAT_TIMEOUT_S passes.
        """
        if stream:
            self._start_stream()
            self.wfile.flush()
        sim = self.sim
        deadline = time.monotonic() + CHAT_TIMEOUT_S
        while sim.state.stalled and time.monotonic() < deadline:
            if sim._stopping.wait(0.05):
                break
        self.close_connection = True


def _raise_fault(fault: str, sim: SimServer) -> None:
    """Answer a chat request the way an injected fault says (hang, 400, 500)."""
    if fault == "timeout":
        sim._stopping.wait(CHAT_TIMEOUT_S)
        raise ApiError(HTTPStatus.INTERNAL_SERVER_ERROR, "simulated timeout elapsed")
    if fault == "http_400":
        raise ApiError(HTTPStatus.BAD_REQUEST, "simulated bad request (chat_fault=http_400)")
    if fault == "http_500":
        raise ApiError(HTTPStatus.INTERNAL_SERVER_ERROR,
                       "simulated server error (chat_fault=http_500)")


class _ChatEmitter:
    """Writes one chat answer, streamed or whole, and yields the time each token left.

    With `truncate`, the connection drops halfway through the answer: a stream
    ends without its last chunks and `[DONE]`, a whole answer without the rest
    of its announced body.
    """

    def __init__(self, handler: _Handler, req: ChatRequest, model: str,
                 prompt_tokens: int, truncate: bool = False) -> None:
        self.truncate = truncate
        self.handler = handler
        self.req = req
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.completion_id = openai_api.new_completion_id()
        self.created = int(time.time())

    def run(self, deltas: list[str], finish: str) -> Iterator[float]:
        """Send the answer; yields a monotonic timestamp per generated token."""
        if not self.req.stream:
            stamp = time.monotonic()
            for _ in deltas:
                yield stamp
            payload = openai_api.chat_response(self.completion_id, self.created, self.model,
                                               deltas, finish, self.prompt_tokens)
            if self.truncate:
                self._send_half(json.dumps(payload).encode())
                return
            self.handler._answer_ending()
            self.handler._send_json(HTTPStatus.OK, payload)
            return
        yield from self._stream(deltas, finish)

    def _event(self, payload: object) -> None:
        self.handler._write_event(json.dumps(payload, separators=(",", ":")))

    def _stream(self, deltas: list[str], finish: str) -> Iterator[float]:
        ident = (self.completion_id, self.created, self.model)
        self.handler._start_stream()
        self._event(openai_api.chat_chunk(*ident, {"role": "assistant", "content": ""}))
        for i, delta in enumerate(deltas):
            if self.truncate and i >= len(deltas) // 2:
                self.handler.close_connection = True
                self.handler.wfile.flush()
                return
            last = i == len(deltas) - 1
            self._event(openai_api.chat_chunk(*ident, {"content": delta},
                                              finish if last else None))
            yield time.monotonic()
        if not deltas:
            self._event(openai_api.chat_chunk(*ident, {"content": ""}, finish))
        if self.req.include_usage and self.handler.sim.state.model_dialect != "llamacpp":
            self._event(openai_api.usage_chunk(*ident, self.prompt_tokens, len(deltas)))
        self.handler._answer_ending()
        self.handler._write_event("[DONE]")
        self.handler._end_stream()


    def _send_half(self, body: bytes) -> None:
        handler = self.handler
        handler.send_response(HTTPStatus.OK)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body[:len(body) // 2])
        handler.wfile.flush()
        handler.close_connection = True


_GET_ROUTES = {
    "/health": _Handler._health,
    "/metrics": _Handler._metrics,
    "/v1/models": _Handler._models,
    "/version": _Handler._version,
}
_POST_ROUTES = {
    "/tokenize": _Handler._tokenize,
    "/v1/chat/completions": _Handler._chat,
}
