"""Look at vLLM servers before writing a config: what each one is, and how to reach its logs.

Every question has a short timeout and an answer that says what was not found, so
`sentinel init` writes a config (with a comment saying what to fill in) even for a
server that is down right now.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

TIMEOUT_S = 5.0
DEFAULT_SOCKET = "/var/run/docker.sock"
_NAME = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)")
_TPU = re.compile(r"(?:^|[_:])tpu(?:$|[_:])")  # a word: time_per_ou*tpu*t is not a TPU


@dataclass(frozen=True, slots=True)
class Container:
    """A container that publishes the server's port, on a Docker socket Sentinel can reach."""

    name: str
    image: str
    socket: str


@dataclass(frozen=True, slots=True)
class ServerLook:
    """What one vLLM server said; `problems` holds what could not be asked, in words."""

    url: str
    version: str | None = None
    model: str | None = None
    metrics: frozenset[str] = frozenset()
    container: Container | None = None
    problems: tuple[str, ...] = ()
    sockets_tried: tuple[str, ...] = field(default=())

    @property
    def answered(self) -> bool:
        """Whether /metrics answered with vLLM metrics."""
        return any(m.startswith("vllm:") for m in self.metrics)

    @property
    def legacy_metrics(self) -> bool:
        """vLLM before 0.9 names its KV cache gauge gpu_cache_usage_perc."""
        return ("vllm:gpu_cache_usage_perc" in self.metrics
                and "vllm:kv_cache_usage_perc" not in self.metrics)

    @property
    def accelerator(self) -> str:
        """`tpu`, `rocm`, `cuda` from the container's image or the metrics; else `unknown`."""
        hint = (self.container.image if self.container else "").lower()
        if "tpu" in hint or any(_TPU.search(m) for m in self.metrics):
            return "tpu"
        if "rocm" in hint:
            return "rocm"
        if "vllm-openai" in hint or "cuda" in hint:
            return "cuda"
        return "unknown"


def look(url: str, sockets: list[str]) -> ServerLook:
    """Ask the server at `url` (base URL, no /metrics) and the Docker sockets about it."""
    url = url.rstrip("/")
    problems: list[str] = []
    version = model = None
    with httpx.Client(timeout=TIMEOUT_S) as client:
        metrics = _metric_names(client, url, problems)
        if not problems:  # a server that did not answer /metrics will not answer these
            version = _json_field(client, f"{url}/version", ("version",), problems)
            model = _json_field(client, f"{url}/v1/models", ("data", 0, "id"), problems)
    reachable = [s for s in sockets if os.path.exists(s)]
    container = None
    for sock in reachable:
        container = _container_on(sock, url, problems)
        if container is not None:
            break
    if not reachable:
        problems.append("no Docker socket here (" + ", ".join(sockets) + "): logs and "
                        "restarts need one, or a log file / journal unit")
    return ServerLook(url, version, model, metrics, container, tuple(problems),
                      tuple(sockets))


def _metric_names(client: httpx.Client, url: str, problems: list[str]) -> frozenset[str]:
    try:
        reply = client.get(f"{url}/metrics")
        reply.raise_for_status()
    except httpx.HTTPError as exc:
        problems.append(f"{url}/metrics: {_words(exc)}")
        return frozenset()
    names = set()
    for line in reply.text.splitlines():
        if line and not line.startswith("#") and (m := _NAME.match(line)):
            names.add(m.group(1))
    return frozenset(names)


def _json_field(client: httpx.Client, url: str, path: tuple[str | int, ...],
                problems: list[str]) -> str | None:
    try:
        reply = client.get(url)
        reply.raise_for_status()
        value = reply.json()
        for part in path:
            value = value[part]
    except httpx.HTTPError as exc:
        problems.append(f"{url}: {_words(exc)}")
        return None
    except (ValueError, KeyError, IndexError, TypeError):
        problems.append(f"{url}: not the answer vLLM gives")
        return None
    return str(value)


def _container_on(sock: str, url: str, problems: list[str]) -> Container | None:
    """The container on `sock` that publishes the URL's port (Docker's GET /containers/json)."""
    port = urlsplit(url).port or (443 if url.startswith("https") else 80)
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=sock), timeout=TIMEOUT_S) as c:
            reply = c.get("http://docker/containers/json")
            reply.raise_for_status()
            listed = reply.json()
    except (httpx.HTTPError, ValueError) as exc:
        problems.append(f"Docker socket {sock}: {_words(exc)} (is this user in the "
                        "docker group?)")
        return None
    for c in listed if isinstance(listed, list) else []:
        ports = {p.get("PublicPort") for p in c.get("Ports") or [] if isinstance(p, dict)}
        if port in ports and c.get("Names"):
            return Container(str(c["Names"][0]).lstrip("/"), str(c.get("Image", "")), sock)
    return None


def _words(exc: BaseException) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    cause = exc.__cause__ or exc.__context__
    return str(getattr(cause, "strerror", None) or exc or type(exc).__name__)
