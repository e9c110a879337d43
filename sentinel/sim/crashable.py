"""Simulated vLLM servers that crash and come back, behind one fake Docker socket.

What `sentinel demo` and `bench/pagestream.py` stage as "a crash": a
simulator that is also a container (`container.py`) named after its target,
with a log file Sentinel follows and an XLA cache folder on the "host". A
warm server's cache holds a compiled graph, so a `docker_restart` through
the socket brings it back in `warm_start_s`; a cold one's cache is empty, so
a policy without `allow_cold` refuses to restart it.

    servers = [start_crashable(folder, "tpu-a", warm=True)]
    socket = serve_docker(str(folder / "docker.sock"), servers)
    servers[0].crash()          # HBM OOM traceback in its log, then no answer
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sentinel.sim.container import ContainerSpec, SimContainer
from sentinel.sim.docker_socket import DockerSocket
from sentinel.sim.server import SimServer, start_sim

# What vLLM prints as it starts: the log file is not empty when Sentinel joins it.
_FIRST_LINE = "(APIServer pid=1) INFO:     Started server process [1]\n"


@dataclass(frozen=True)
class Crashable:
    """One simulated server with its container, log file and XLA cache folder."""

    name: str
    sim: SimServer
    log: Path
    cache: Path

    @property
    def container(self) -> SimContainer:
        """The simulated container (events, state) behind the server."""
        return self.sim.container  # type: ignore[no-any-return]

    def crash(self) -> None:
        """Write an HBM OOM traceback to the log, then stop answering (the process exited)."""
        self.container.crash("down")

    def bring_back(self) -> None:
        """Start the container again, as a person would (warm or cold, as its cache says)."""
        self.container.start()

    def stop(self) -> None:
        """Stop serving HTTP."""
        self.sim.stop()


def start_crashable(folder: Path, name: str, warm: bool, cold_start_s: float = 20.0
                    ) -> Crashable:
    """A simulator as container `name`, its log at folder/NAME.log, its cache folder/NAME-xla.

    `warm`: the cache holds a compiled graph (a restart takes 0.3 s); else it is
    empty (a restart would compile for `cold_start_s`, 20+ minutes on a real TPU).
    """
    log, cache = folder / f"{name}.log", folder / f"{name}-xla"
    log.write_text(_FIRST_LINE)
    cache.mkdir(exist_ok=True)
    if warm:
        (cache / "jit_step_fn-compiled.bin").write_bytes(b"\0" * 1024)
    sim = start_sim()
    sim.container = SimContainer(sim, ContainerSpec(
        name=name, xla_cache=str(cache), log_file=str(log), release_s=0.2, warm_start_s=0.3,
        cold_start_s=cold_start_s))
    return Crashable(name, sim, log, cache)


def serve_docker(path: str, servers: Sequence[Crashable]) -> DockerSocket:
    """One Docker-API socket at `path` for every server's container (named as the server)."""
    return DockerSocket(path, [s.container for s in servers]).start()
