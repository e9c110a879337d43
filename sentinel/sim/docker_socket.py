"""A Docker-Engine-API-compatible subset on a unix socket, for the simulated container.

    GET  /_ping                          OK
    GET  /containers/json                list (Names, Image, State, Ports: the sim's port)
    GET  /containers/{name}/json         inspect (State, Config.Env, Mounts)
    POST /containers/{name}/stop?t=N     204, or 304 when already stopped
    POST /containers/{name}/start        204, or 304 when already running
    POST /containers/{name}/restart      204
    GET  /containers/{name}/logs         the container's output as Docker's multiplexed
                                         stream (stdout/stderr, since=, timestamps=1,
                                         follow=1 keeps the response open)
    GET  /events                         the containers' start/kill/oom/die/stop events as
                                         JSON lines (since=, until=, filters=; without
                                         until the response stays open)

Paths may carry an API version prefix (`/v1.41/...`), as the Docker CLI and
SDKs send. Unknown containers get 404 `{"message": "No such container: x"}`.
"""

from __future__ import annotations

import json
import os
import re
import socketserver
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from sentinel.sim import dockerevents, dockerlogs
from sentinel.sim.container import ContainerSpec, SimContainer

_PATH = re.compile(r"^(?:/v[0-9.]+)?/containers/([^/]+)/(json|logs|stop|start|restart)$")
_PING = re.compile(r"^(?:/v[0-9.]+)?/_ping$")
_LIST = re.compile(r"^(?:/v[0-9.]+)?/containers/json$")
_EVENTS = re.compile(r"^(?:/v[0-9.]+)?/events$")


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    containers: dict[str, SimContainer]
    stopping: threading.Event  # ends the followers of a logs stream


class DockerSocket:
    """Serves the Docker API subset for some simulated containers on a unix socket."""

    def __init__(self, path: str, containers: list[SimContainer]) -> None:
        if os.path.exists(path):
            os.unlink(path)
        self.path = path
        self._server = _Server(path, _Handler)
        self._server.containers = {c.spec.name: c for c in containers}
        self._server.stopping = threading.Event()
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name="sentinel-sim-docker", daemon=True)

    def start(self) -> DockerSocket:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket file."""
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if os.path.exists(self.path):
            os.unlink(self.path)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "Docker/27.5.1 (linux)"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def address_string(self) -> str:
        return "unix"

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        path = unquote(urlsplit(self.path).path)
        if _PING.match(path):
            self._send(HTTPStatus.OK, b"OK", "text/plain")
            return
        if _LIST.match(path):  # `sentinel init` finds the container serving a URL here
            containers = self.server.containers.values()  # type: ignore[attr-defined]
            self._json(HTTPStatus.OK, [c.summary() for c in containers])
            return
        if _EVENTS.match(path):
            dockerevents.serve(self, list(self.server.containers.values()),  # type: ignore[attr-defined]
                               parse_qs(urlsplit(self.path).query),
                               self.server.stopping)  # type: ignore[attr-defined]
            return
        m = _PATH.match(path)
        if not m or m.group(2) not in ("json", "logs"):
            self._json(HTTPStatus.NOT_FOUND, {"message": "page not found"})
            return
        container = self._container(m.group(1))
        if container is None:
            return
        if m.group(2) == "logs":
            container.event("GET logs")  # a test can wait until a follower is reading
            dockerlogs.serve(self, container, parse_qs(urlsplit(self.path).query),
                             self.server.stopping)  # type: ignore[attr-defined]
            return
        self._json(HTTPStatus.OK, container.inspect())

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        m = _PATH.match(unquote(urlsplit(self.path).path))
        if not m or m.group(2) in ("json", "logs"):
            self._json(HTTPStatus.NOT_FOUND, {"message": "page not found"})
            return
        container = self._container(m.group(1))
        if container is None:
            return
        container.event(f"POST {m.group(2)}")
        verb = m.group(2)
        if verb == "restart":
            container.restart()
            changed = True
        else:
            changed = container.stop() if verb == "stop" else container.start()
        self._send(HTTPStatus.NO_CONTENT if changed else HTTPStatus.NOT_MODIFIED, b"", None)

    def _container(self, name: str) -> SimContainer | None:
        found = self.server.containers.get(name.lstrip("/"))  # type: ignore[attr-defined]
        if found is None:
            self._json(HTTPStatus.NOT_FOUND, {"message": f"No such container: {name}"})
        return found  # type: ignore[no-any-return]

    def _json(self, status: HTTPStatus, body: object) -> None:
        self._send(status, json.dumps(body).encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str | None) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        if status not in (HTTPStatus.NO_CONTENT, HTTPStatus.NOT_MODIFIED):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and status not in (HTTPStatus.NO_CONTENT, HTTPStatus.NOT_MODIFIED):
            self.wfile.write(body)


def serve_container(sim: Any, spec: ContainerSpec, socket_path: str) -> DockerSocket:
    """Make `sim` a container (crashes, restarts) and serve its Docker API at `socket_path`."""
    sim.container = SimContainer(sim, spec)
    return DockerSocket(socket_path, [sim.container]).start()
