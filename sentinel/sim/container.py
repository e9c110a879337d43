"""The simulated server as a container: stop, start, crash, and a warm or cold comeback.

What `sentinel sim --docker-socket` exposes through its Docker-API subset:

- stop: the process takes `stop_s` to exit (the POST returns then, as Docker's
  does), but the TPU chip stays held for `release_s` more (driver teardown);
- start during that window: the new process dies at once with "The TPU is
  already in use by process with pid N" (ExitCode 1), as on a real TPU VM;
- start otherwise: the server is "loading" (no answer) for `warm_start_s` when
  the XLA cache directory holds files, else `cold_start_s` (and the cold start
  fills the cache, as compilation would);
- crash: write an HBM OOM traceback to the log file and stop answering
  (`down`, the process exited) or answer /health with 503 (`unhealthy`);
  `engine_dead`: an EngineCore failure, then a clean shutdown that exits 0
  (vllm #48966), which a supervisor's on-failure restart never catches;
  `oom`: the kernel's OOM killer ends the process at its memory limit
  (exit 137, `OOMKilled`), with no line of its own.
- every start, stop and death is a Docker event (`start`, `kill`, `oom`,
  `die` with its `exitCode`, `stop`) that `GET /events` serves.
- with `lockfile` set, a running process holds libtpu's lock file there: a
  stop removes it, a `down` crash leaves it behind, and a start that finds it
  dies "already in use" by the pid written in it (a stale lock, as libtpu's).

Every request and transition is kept in `events` with its wall-clock time,
so tests can measure e.g. crash line → restart request.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sentinel.sim import crashlog

_pids = itertools.count(4100)


@dataclass(frozen=True)
class ContainerSpec:
    """How the simulated container behaves."""

    name: str = "vllm"
    xla_cache: str | None = None
    log_file: str | None = None
    stop_s: float = 0.05
    release_s: float = 0.3
    warm_start_s: float = 0.3
    cold_start_s: float = 20.0
    lockfile: str | None = None
    lockfile_mounted: bool = True  # the lock file's folder is bind-mounted from the host
    # gpu: a GPU server (NVIDIA_VISIBLE_DEVICES, `--gpus all`, no XLA cache); its start is
    # warm when `compile_cache` (VLLM_CACHE_ROOT, bind-mounted) holds files, or when none is
    # given (the cache lives in the container's own filesystem, kept across a restart).
    accelerator: str = "tpu"
    compile_cache: str | None = None


def _iso(t: float | None) -> str:
    if t is None:
        return "0001-01-01T00:00:00Z"
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


class SimContainer:
    """Lifecycle of the simulated server process, driving the SimServer's state."""

    def __init__(self, sim: Any, spec: ContainerSpec) -> None:
        self.sim = sim
        self.spec = spec
        self.events: list[tuple[float, str]] = []
        # What the container printed, (time, line): the Docker API's logs endpoint serves it.
        self.output: list[tuple[float, str]] = []
        self.output_changed = threading.Condition()
        # Docker's events of this container (the /events endpoint), under output_changed.
        self.docker_events: list[dict[str, Any]] = []
        self.oom_killed = False
        self._lock = threading.Lock()
        self.pid = next(_pids)
        self.running = True
        self.exit_code = 0
        self.error = ""
        self.started_at: float | None = time.time()
        self.finished_at: float | None = None
        self._chip_holder: tuple[int, float] | None = None  # (pid, until)
        self._generation = 0
        if spec.lockfile:  # the running server holds libtpu's lock file
            Path(spec.lockfile).write_text(f"{self.pid}\n")

    def event(self, what: str) -> None:
        """Record something that happened, with the wall-clock time."""
        with self._lock:
            self.events.append((time.time(), what))

    def times(self, prefix: str) -> list[float]:
        """Times of the events starting with `prefix`."""
        with self._lock:
            return [t for t, what in self.events if what.startswith(prefix)]

    # -- Docker API shapes -------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """One entry of `GET /containers/json`: the sim's port published as vLLM's 8000."""
        info = self.inspect()
        port = {"IP": "127.0.0.1", "PrivatePort": 8000, "PublicPort": self.sim.port,
                "Type": "tcp"}
        return {"Id": info["Id"], "Names": [info["Name"]], "Image": info["Config"]["Image"],
                "State": info["State"]["Status"], "Ports": [port]}

    def inspect(self) -> dict[str, Any]:
        """`GET /containers/{id}/json`, the fields Docker documents (a subset)."""
        with self._lock:
            status = "running" if self.running else "exited"
            env = ["PATH=/usr/local/bin:/usr/bin:/bin"]
            mounts = []
            if self.spec.xla_cache:
                env.append(f"VLLM_XLA_CACHE_PATH={self.spec.xla_cache}")
                mounts.append({"Type": "bind", "Source": self.spec.xla_cache,
                               "Destination": self.spec.xla_cache, "Mode": "", "RW": True,
                               "Propagation": "rprivate"})
            if self.spec.accelerator == "gpu":
                env.append("NVIDIA_VISIBLE_DEVICES=all")
                if self.spec.compile_cache:
                    env.append(f"VLLM_CACHE_ROOT={self.spec.compile_cache}")
                    mounts.append({"Type": "bind", "Source": self.spec.compile_cache,
                                   "Destination": self.spec.compile_cache, "Mode": "",
                                   "RW": True, "Propagation": "rprivate"})
            if self.spec.lockfile and self.spec.lockfile_mounted:  # e.g. -v /tmp:/tmp
                folder = os.path.dirname(self.spec.lockfile)
                mounts.append({"Type": "bind", "Source": folder, "Destination": folder,
                               "Mode": "", "RW": True, "Propagation": "rprivate"})
            return {
                "Id": f"{abs(hash(self.spec.name)):064x}"[:64], "Name": f"/{self.spec.name}",
                "Created": _iso(self.started_at), "Path": "vllm", "Args": ["serve"],
                "State": {"Status": status, "Running": self.running, "Paused": False,
                          "Restarting": False, "OOMKilled": self.oom_killed, "Dead": False,
                          "Pid": self.pid if self.running else 0, "ExitCode": self.exit_code,
                          "Error": self.error, "StartedAt": _iso(self.started_at),
                          "FinishedAt": _iso(self.finished_at)},
                "Config": {"Image": self._image(), "Env": env},
                "HostConfig": self._host_config(),
                "Mounts": mounts,
            }

    def stop(self) -> bool:
        """Stop the process; False when it was not running (Docker's 304)."""
        self.event("stop")
        with self._lock:
            if not self.running:
                return False
            old = self.pid
        self.docker_event("kill", signal="15")
        self.sim.set_state(down=True)
        time.sleep(self.spec.stop_s)
        with self._lock:
            self._exit(0, "")
            self._chip_holder = (old, time.monotonic() + self.spec.release_s)
        self.docker_event("stop")
        if self.spec.lockfile:  # a clean exit releases libtpu's lock file
            Path(self.spec.lockfile).unlink(missing_ok=True)
        return True

    def start(self) -> bool:
        """Start the process; False when it was running (Docker's 304)."""
        self.event("start")
        with self._lock:
            if self.running:
                return False
            self.pid, self.running, self.exit_code, self.error = next(_pids), True, 0, ""
            self.started_at, self.finished_at, self.oom_killed = time.time(), None, False
            self._generation += 1
            generation, holder = self._generation, self._chip_holder
        self.docker_event("start")
        if holder is not None and time.monotonic() < holder[1]:
            self._die_busy(holder[0])
            return True
        stale = self._lock_holder()
        if stale is not None:
            self.event(f"lockfile present: {self.spec.lockfile}")
            self._die_busy(stale)
            return True
        if self.spec.lockfile:
            Path(self.spec.lockfile).write_text(f"{self.pid}\n")
        warm = self._warm()
        delay = self.spec.warm_start_s if warm else self.spec.cold_start_s
        self.event(f"loading {'warm' if warm else 'cold'} {delay}s")
        self._log(crashlog.start_lines(self.spec.accelerator, warm, self.pid), event=False)
        timer = threading.Timer(delay, self._serving, args=(generation, warm))
        timer.daemon = True
        timer.start()
        return True

    def restart(self) -> None:
        """`POST /restart`: stop then start at once (what a naive restart does)."""
        self.stop()
        self.start()

    def crash(self, mode: str, log: bool = True) -> None:
        """Log an HBM OOM, then stop answering (`down`) or answer 503 (`unhealthy`).

        `engine_dead`: log an EngineCore death and exit with code 0.
        """
        if mode not in ("down", "unhealthy", "engine_dead", "oom"):
            raise ValueError(
                f"crash mode must be down, unhealthy, engine_dead or oom, got {mode!r}")
        if mode == "oom":  # the kernel's OOM killer: SIGKILL, nothing written by the server
            self.event("crash oom")
            self.sim.set_state(down=True)
            with self._lock:
                self.oom_killed = True
                self._exit(137, "")
            return
        if mode == "engine_dead":
            if log:
                self._log(crashlog.render(crashlog.ENGINE_DEAD_EXIT_0, self.pid))
            self.event("crash engine_dead")
            self.sim.set_state(down=True)
            with self._lock:
                self._exit(0, "")
            return
        if log:
            self._log(crashlog.render(crashlog.HBM_OOM, self.pid))
        self.event(f"crash {mode}")
        if mode == "down":
            self.sim.set_state(down=True)
            with self._lock:
                self._exit(1, "")
        else:
            self.sim.set_state(healthy=False)

    # -- internals ---------------------------------------------------------------

    def print(self, lines: list[str]) -> None:
        """The container writes these lines to its output (stdout/stderr, as vLLM's logs)."""
        with self.output_changed:
            now = time.time()
            self.output.extend((now, line) for line in lines)
            self.output_changed.notify_all()

    def _lock_holder(self) -> int | None:
        """The pid in libtpu's lock file when one is there (stale or held), else None."""
        if not self.spec.lockfile or not os.path.exists(self.spec.lockfile):
            return None
        try:
            return int(Path(self.spec.lockfile).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def docker_event(self, action: str, **attributes: str) -> None:
        """Record a Docker event of this container, as the engine's /events serves it."""
        now = time.time_ns()
        attrs = {"image": "vllm/vllm-tpu:latest", "name": self.spec.name, **attributes}
        ident = f"{abs(hash(self.spec.name)):064x}"[:64]
        with self.output_changed:
            self.docker_events.append({
                "status": action, "id": ident, "from": attrs["image"], "Type": "container",
                "Action": action, "Actor": {"ID": ident, "Attributes": attrs},
                "scope": "local", "time": now // 1_000_000_000, "timeNano": now})
            self.output_changed.notify_all()

    def _exit(self, code: int, error: str) -> None:
        """The process ended (the caller holds `_lock`): Docker's `oom` and `die` events."""
        self.running, self.exit_code, self.error = False, code, error
        self.finished_at = time.time()
        if self.oom_killed:
            self.docker_event("oom")
        self.docker_event("die", exitCode=str(code))

    def _die_busy(self, holder: int) -> None:
        with self._lock:
            pid = self.pid
            self._exit(1, f"The TPU is already in use by process with pid {holder}")
        self._log(crashlog.render(crashlog.TPU_BUSY, pid, holder))
        self.event(f"died: TPU in use by {holder}")

    def _image(self) -> str:
        return "vllm/vllm-openai:latest" if self.spec.accelerator == "gpu" \
            else "vllm/vllm-tpu:latest"

    def _host_config(self) -> dict[str, Any]:
        if self.spec.accelerator == "gpu":  # `docker run --gpus all`
            return {"DeviceRequests": [{"Driver": "", "Count": -1, "DeviceIDs": None,
                                        "Capabilities": [["gpu"]], "Options": {}}]}
        return {"Privileged": True, "DeviceRequests": None}

    def _cache_dir(self) -> str | None:
        return self.spec.compile_cache if self.spec.accelerator == "gpu" else self.spec.xla_cache

    def _warm(self) -> bool:
        cache = self._cache_dir()
        if self.spec.accelerator == "gpu" and cache is None:
            return True
        return bool(cache) and os.path.isdir(cache or "") and any(os.scandir(cache or "."))

    def _serving(self, generation: int, warm: bool) -> None:
        with self._lock:
            if generation != self._generation or not self.running:
                return
        cache = self._cache_dir()
        if not warm and cache:  # compiling filled the cache (written as the start ends)
            Path(cache).mkdir(parents=True, exist_ok=True)
            (Path(cache) / "jit_step_fn-compiled.bin").write_bytes(b"\0" * 1024)
        self.sim.set_state(down=False, healthy=True)
        self._log(["(APIServer pid=1) INFO:     Application startup complete."], event=False)
        self.event("serving")

    def _log(self, lines: list[str], event: bool = True) -> None:
        """Print `lines` and append them to the log file; `event`: record "logged" (a crash)."""
        self.print(lines)
        if not self.spec.log_file:
            return
        with open(self.spec.log_file, "a", encoding="utf-8") as f:
            f.write("".join(f"{line}\n" for line in lines))
            f.flush()
        if event:
            self.event("logged")
