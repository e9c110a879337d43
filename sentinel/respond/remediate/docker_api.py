"""A small Docker Engine API client over the unix socket (httpx, UDS transport).

Only what docker_restart needs: inspect, stop, start. Paths are versioned
(`/v1.41`, Docker 20.10+) so the daemon answers in that API's shapes. Errors
become `DockerError` with the daemon's `message` and whether the container
is missing; transport failures (socket gone, timeout) say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

API_VERSION = "v1.41"


class DockerError(Exception):
    """The Docker daemon refused or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    """The parts of `GET /containers/{id}/json` remediation reads."""

    name: str
    running: bool
    pid: int
    status: str
    error: str
    env: dict[str, str]
    mounts: tuple[tuple[str, str], ...]  # (source on the host, destination in the container)
    image: str = ""
    devices: tuple[str, ...] = ()  # HostConfig.Devices: paths on the host (/dev/nvidia0)
    gpus: bool = False  # HostConfig.DeviceRequests asks for GPUs (`docker run --gpus`)
    started_at_ms: int | None = None  # State.StartedAt (None: never started, or unreadable)

    def mounted(self, path: str) -> str | None:
        """The host path of a container path under a mount; None when no mount covers it."""
        if not any(path == m[1] or path.startswith(m[1].rstrip("/") + "/") for m in self.mounts):
            return None
        return self.host_path(path)

    def host_path(self, path: str) -> str:
        """A path inside the container as seen on the host, through its mounts."""
        best = max((m for m in self.mounts if path == m[1] or path.startswith(m[1].rstrip("/")
                                                                              + "/")),
                   key=lambda m: len(m[1]), default=None)
        if best is None:
            return path
        return best[0].rstrip("/") + path[len(best[1].rstrip("/")):]


def parse_inspect(body: dict[str, Any]) -> ContainerInfo:
    """ContainerInfo from an inspect response."""
    state = body.get("State") or {}
    env = {}
    for item in (body.get("Config") or {}).get("Env") or []:
        key, _, value = str(item).partition("=")
        env[key] = value
    mounts = tuple((str(m.get("Source", "")), str(m.get("Destination", "")))
                   for m in body.get("Mounts") or [])
    host = body.get("HostConfig") or {}
    devices = tuple(str(d.get("PathOnHost", "")) for d in host.get("Devices") or []
                    if isinstance(d, dict))
    gpus = any(isinstance(r, dict) and (r.get("Driver") == "nvidia" or any(
        "gpu" in (caps or []) for caps in r.get("Capabilities") or []))
        for r in host.get("DeviceRequests") or [])
    return ContainerInfo(name=str(body.get("Name", "")).lstrip("/"),
                         running=bool(state.get("Running")), pid=int(state.get("Pid") or 0),
                         status=str(state.get("Status", "")),
                         error=str(state.get("Error", "")), env=env, mounts=mounts,
                         image=str((body.get("Config") or {}).get("Image", "")),
                         devices=devices, gpus=gpus,
                         started_at_ms=_docker_time_ms(state.get("StartedAt")))


def _docker_time_ms(value: object) -> int | None:
    """Docker's RFC 3339 time (nanoseconds, `Z`) in ms; None for its zero time or garbage."""
    if not isinstance(value, str) or value.startswith("0001-"):
        return None
    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)
    except ValueError:
        return None


class DockerClient:
    """Docker Engine API on a unix socket; one short-lived HTTP connection pool."""

    def __init__(self, socket_path: str, timeout_s: float = 10.0) -> None:
        self._http = httpx.Client(transport=httpx.HTTPTransport(uds=socket_path),
                                  base_url=f"http://docker/{API_VERSION}", timeout=timeout_s)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> DockerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def inspect(self, container: str) -> ContainerInfo:
        """GET /containers/{id}/json."""
        return parse_inspect(self._call("GET", f"/containers/{quote(container, safe='')}/json"))

    def stop(self, container: str, timeout_s: int) -> bool:
        """POST /containers/{id}/stop?t=N; False when it was already stopped (304)."""
        return self._post(container, "stop", {"t": str(timeout_s)}, extra_s=timeout_s)

    def start(self, container: str) -> bool:
        """POST /containers/{id}/start; False when it was already running (304)."""
        return self._post(container, "start", {})

    def _post(self, container: str, verb: str, params: dict[str, str],
              extra_s: float = 0) -> bool:
        path = f"/containers/{quote(container, safe='')}/{verb}"
        timeout = httpx.Timeout(self._http.timeout.read + extra_s if self._http.timeout.read
                                else None)
        self._call("POST", path, params=params, timeout=timeout, expect=(204, 304))
        return self._last_status == 204

    def _call(self, method: str, path: str, *, params: dict[str, str] | None = None,
              timeout: httpx.Timeout | None = None, expect: tuple[int, ...] = (200,)) -> Any:
        try:
            kwargs: dict[str, Any] = {"params": params}
            if timeout is not None:
                kwargs["timeout"] = timeout
            resp = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise DockerError(f"docker daemon unreachable: {type(exc).__name__}: {exc}") from None
        self._last_status = resp.status_code
        if resp.status_code not in expect:
            try:
                message = str(resp.json().get("message", ""))
            except ValueError:
                message = resp.text[:200]
            raise DockerError(f"{method} {path}: {resp.status_code} {message}".strip(),
                              resp.status_code)
        return resp.json() if resp.status_code == 200 else None
