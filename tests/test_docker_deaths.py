"""A container's deaths from the Docker engine's events (issue 51): one event per death.

The simulator's Docker socket serves `GET /events` as the engine does (JSON
lines, `since`, `filters`, followed); the source puts each `die` and `oom`
event in the container's stream as `docker events` prints it. An OOM kill
the server never wrote a line about opens one event with the last lines
before it; a crash the server named is one event, its `die` joined to it;
a clean stop (exit 0) is none.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_e2e import wait_for

from sentinel.collect.dockerapi_logs import DockerApiLogSource
from sentinel.collect.logcursor import MemoryCursorStore
from sentinel.logs import Classifier, load_signature_file
from sentinel.model import LogEvent
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import start_sim

ROOT = Path(__file__).resolve().parent.parent
SERVING = [f"INFO 12-07 10:00:{i:02d} [loggers.py:123] Engine 000: Avg prompt throughput: "
           f"{i}.0 tokens/s, Running: 1 reqs" for i in range(8)]


@pytest.fixture
def container() -> Iterator[tuple[object, str]]:
    sim = start_sim()
    folder = Path(tempfile.mkdtemp(prefix="dd-", dir="/tmp"))  # unix socket paths are short
    path = str(folder / "docker.sock")
    sock = serve_container(sim, ContainerSpec(name="vllm", warm_start_s=0.05), path)
    yield sim.container, path
    sock.stop()
    sim.stop()
    shutil.rmtree(folder, ignore_errors=True)


class _Watch:
    """What LogWatch does with one source: poll, classify, flush when quiet."""

    def __init__(self, path: str) -> None:
        self.source = DockerApiLogSource("tpu-a", "vllm", path,
                                         cursor_store=MemoryCursorStore())
        self.classifier = Classifier(load_signature_file(ROOT / "rules" / "signatures.yaml"))
        self.texts: list[str] = []
        self.events: list[LogEvent] = []

    def poll(self) -> list[LogEvent]:
        now = int(time.time() * 1000)
        entries = self.source.poll(now)
        self.texts += [e.text for e in entries]
        self.events += self.classifier.feed_many(entries, now_ms=now)
        if not entries:
            self.events += self.classifier.flush(now)
        return self.events

    def until_read(self, marker: str) -> None:
        wait_for(lambda: self.poll() is not None and marker in self.texts, 20, repr(marker))


def test_each_death_of_the_container_is_one_event(container) -> None:  # noqa: ANN001
    sim_container, path = container
    watch = _Watch(path)
    watch.poll()
    wait_for(lambda: watch.source.health.ok and watch.source._events_thread is not None, 5,
             "the readers")
    sim_container.print(SERVING)
    watch.until_read(SERVING[-1])
    # 1. The kernel's OOM killer at the container's memory limit: no line from the server.
    sim_container.crash("oom", log=False)
    oom = wait_for(lambda: [e for e in watch.poll()], 20, "the OOM kill's event")
    assert [(e.signature, e.category) for e in oom] == [("container_oom_killed",
                                                        "host_oom_killed")]
    excerpt = "\n".join(oom[0].excerpt)
    assert SERVING[-1] in excerpt and "container oom" in excerpt  # the last lines, the record
    # 2. A crash the server names, then its exit: one event, named by the server's words.
    sim_container.start()
    sim_container.print(["INFO serving again"])
    sim_container.crash("down")
    wait_for(lambda: len(watch.poll()) >= 2, 20, "the HBM OOM's event")
    # 3. A clean stop exits 0: no death. The marker's line closes everything before it.
    sim_container.start()
    sim_container.stop()
    wait_for(lambda: any("exitCode=0" in t for t in (watch.poll() and watch.texts)), 20,
             "the clean stop's die event")
    sim_container.print([f"INFO marker {i}" for i in range(12)])
    watch.until_read("INFO marker 11")
    wait_for(lambda: watch.poll() is not None and watch.classifier._group is None, 20,
             "the stream to settle")
    assert [e.signature for e in watch.events] == ["container_oom_killed", "xla_hbm_oom"]
    dies = [t for t in watch.texts if " container die " in t]
    assert [d.split("(exitCode=")[1].split(",")[0] for d in dies] == ["137", "1", "0"]
    watch.source.close()
