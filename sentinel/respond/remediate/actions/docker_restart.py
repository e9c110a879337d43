"""docker_restart: stop a container, wait until its old process let go of the chip, start it.

On TPU the new process fails while the old one still holds the chip
(`/dev/vfio/0: Device or resource busy`, `The TPU is already in use by
process with pid N`), so this is stop → wait for the container's process to
be gone (within `exit_deadline`) → start, not one POST /restart. The check
says what the restart will find: the accelerator (from the container's
environment, devices and image, or the target's `accelerator:` key) and what
makes it warm (TPU: VLLM_XLA_CACHE_PATH holding files, seen on the host
through the mounts, or a durable copy `restore_from` restored first; GPU: the
torch.compile cache and local weights). The engine turns that into an
expected time to serve and the policy decides (restart_cost.py).

Between the old process's exit and the start, the stale libtpu lock file is
removed (see `tpu_lock.py`); a start that dies on a busy chip is retried with
backoff until the exit deadline. Both are in the outcome's data, which the
engine writes on the incident's timeline.
"""

from __future__ import annotations

import time

from sentinel.config.remediation import DockerRestartConfig
from sentinel.respond.remediate.actions import tpu_lock
from sentinel.respond.remediate.base import (
    ActionContext,
    Check,
    Outcome,
    TemplateError,
    render,
)
from sentinel.respond.remediate.cachecopy import copy_tree
from sentinel.respond.remediate.docker_api import ContainerInfo, DockerClient, DockerError
from sentinel.respond.remediate.guards import Reason
from sentinel.respond.remediate.restart_cost import GPU, KEY_WARM, KEY_WHY, TPU
from sentinel.respond.remediate.warm import XLA_ENV, accelerator_of, facts, gpu_facts, xla_facts

CACHE_ENV = XLA_ENV
POLL_S = 0.05


def restarted_since(info: ContainerInfo, since_ms: int | None) -> bool:
    """The container runs a process started after `since_ms` (the failure's start)."""
    return since_ms is not None and info.running and info.started_at_ms is not None \
        and info.started_at_ms > since_ms


class DockerRestart:
    """The docker_restart action."""

    kind = "docker_restart"

    def check(self, ctx: ActionContext) -> Check:
        """Inspect the container and its cache; no side effect."""
        p: DockerRestartConfig = ctx.params
        try:
            name = render(p.container, ctx.labels)
            with DockerClient(p.socket, timeout_s=min(10.0, ctx.timeout_s)) as docker:
                info = docker.inspect(name)
        except (TemplateError, DockerError) as exc:
            return Check.refuse(Reason.PRECONDITION, str(exc))
        if restarted_since(info, ctx.since_ms):
            # A person (or Docker's restart policy) started it after the failure began: a
            # restart now would kill a start that may be about to serve (on a TPU, the
            # new process would also find the chip held). Its verify tells the rest.
            after_s = ((info.started_at_ms or 0) - (ctx.since_ms or 0)) / 1000
            return Check.refuse(Reason.STARTED_ELSEWHERE, (
                f"container {name} was started again {after_s:.0f}s after the failure began, "
                "not by Sentinel: not restarting over that start"),
                container=name, started_at_ms=info.started_at_ms)
        return self._check_cache(ctx, name, info)

    def _check_cache(self, ctx: ActionContext, name: str, info: ContainerInfo) -> Check:
        """What the restart will find (the accelerator, its caches); never a refusal: the
        engine judges the expected cost (restart_cost.py)."""
        p: DockerRestartConfig = ctx.params
        what = f"restart container {name} (pid {info.pid or '-'}, {info.status})"
        accel, told = accelerator_of(info.env, info.devices, info.gpus, info.image,
                                     ctx.target.accelerator)
        if accel == TPU:
            cache = info.env.get(CACHE_ENV)
            data = xla_facts(info.host_path(cache) if cache else None)
            if cache and not data[KEY_WARM] and p.restore_from \
                    and xla_facts(p.restore_from)[KEY_WARM]:
                data.update({KEY_WARM: True, "restore_from": p.restore_from,
                             KEY_WHY: f"{data[KEY_WHY]}; restored from {p.restore_from} first"})
        elif accel == GPU:
            data = gpu_facts(info.env, info.mounted)
        else:
            data = facts(accel, None, f"the accelerator is unknown: {told} tells")
        data.update(container=name, accelerator_from=told)
        state = {True: "warm", False: "COLD", None: "warmth unknown"}[data[KEY_WARM]]
        return Check(True, f"{what} ({accel}, {state}: {data[KEY_WHY]})", data=data)

    def run(self, ctx: ActionContext) -> Outcome:
        """Check again, restore the cache if planned, stop, wait for the old process, start."""
        p: DockerRestartConfig = ctx.params
        deadline = ctx.deadline()
        check = self.check(ctx)
        if not check.ok:
            return Outcome(False, check.summary, check.data)
        name = check.data["container"]
        data = dict(check.data)
        if "restore_from" in data:
            copied = copy_tree(p.restore_from or "", data["xla_cache_path"])
            data["restored_files"] = copied
        try:
            with DockerClient(p.socket, timeout_s=min(10.0, ctx.timeout_s)) as docker:
                old = docker.inspect(name)
                docker.stop(name, p.stop_timeout_ms // 1000)
                until = min(deadline, time.monotonic() + p.exit_deadline_ms / 1000)
                waited = self._wait_exit(docker, name, until)
                data.update(old_pid=old.pid, exit_wait_s=round(waited, 3))
                if waited < 0:
                    return Outcome(False, f"old process (pid {old.pid}) of {name} did not exit "
                                   "before the exit deadline; not started", data)
                data.update(self._clear_lockfile(old, p.libtpu_lockfile))
                new, starts = self._start_until_settled(docker, name, p.settle_ms / 1000, until,
                                                        data)
                data["starts"] = starts
        except DockerError as exc:
            return Outcome(False, str(exc), data)
        data["new_pid"] = new.pid
        lock = tpu_lock.describe(data)
        if not new.running:
            return Outcome(False, f"{name} kept dying after start ({new.error or new.status}); "
                           f"{starts} starts before the exit deadline{lock}", data)
        return Outcome(True, f"restarted {name} (pid {old.pid} → {new.pid}){lock}", data)

    @staticmethod
    def _clear_lockfile(info: ContainerInfo, path: str | None) -> dict[str, object]:
        """Remove the container's stale lock file where the host sees it, through a mount.

        A path no mount covers lives in the container's own filesystem: the host
        file of the same name belongs to someone else and is never touched.
        """
        if not path:
            return {}
        mounted = any(path == dest or path.startswith(dest.rstrip("/") + "/")
                      for _, dest in info.mounts)
        if not mounted:
            return {"libtpu_lockfile": path, "lockfile_removed": False,
                    "lockfile_note": "inside the container's own filesystem (no mount): "
                                     "not reachable from the host, left alone"}
        return tpu_lock.clear_stale_lockfile(info.host_path(path))

    @staticmethod
    def _start_until_settled(docker: DockerClient, name: str, settle_s: float,
                             until: float, data: dict[str, object]) -> tuple[ContainerInfo, int]:
        """Start; while the new process dies within `settle_s` on a busy chip ("The TPU is
        already in use": the old one's driver teardown), back off and start again until
        `until`. A death for another reason (an error that is not about the chip) is final.
        Docker reports a process's own exit with an empty error, which counts as retryable."""
        starts = 0
        delays = tpu_lock.backoff_delays()
        waited = 0.0
        while True:
            docker.start(name)
            starts += 1
            settled = time.monotonic() + settle_s
            info = docker.inspect(name)
            while info.running and time.monotonic() < settled:
                time.sleep(POLL_S)
                info = docker.inspect(name)
            if info.running or time.monotonic() >= until:
                break
            if info.error and not tpu_lock.chip_busy(info.error):
                break
            pause = min(next(delays), max(0.0, until - time.monotonic()))
            waited += pause
            time.sleep(pause)
        data.update(busy_retries=starts - 1, backoff_s=round(waited, 3))
        return info, starts

    @staticmethod
    def _wait_exit(docker: DockerClient, name: str, until: float) -> float:
        """Seconds until the container reports no process; -1 if `until` came first."""
        start = time.monotonic()
        while True:
            info = docker.inspect(name)
            if not info.running and info.pid == 0:
                return time.monotonic() - start
            if time.monotonic() >= until:
                return -1.0
            time.sleep(POLL_S)
