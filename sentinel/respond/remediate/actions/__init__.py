"""The allow-listed actions, one file each; `ACTIONS` maps a config key to its implementation."""

from __future__ import annotations

from sentinel.respond.remediate.actions.command import Command
from sentinel.respond.remediate.actions.docker_restart import DockerRestart
from sentinel.respond.remediate.actions.kubernetes_pod_restart import KubernetesPodRestart
from sentinel.respond.remediate.actions.kubernetes_rollout_restart import KubernetesRolloutRestart
from sentinel.respond.remediate.actions.systemd_restart import SystemdRestart
from sentinel.respond.remediate.actions.tpu_node_restart import TpuNodeRestart
from sentinel.respond.remediate.actions.xla_cache_backup import XlaCacheBackup
from sentinel.respond.remediate.base import Action

ACTIONS: dict[str, Action] = {a.kind: a for a in (
    DockerRestart(), SystemdRestart(), Command(), TpuNodeRestart(), XlaCacheBackup(),
    KubernetesPodRestart(), KubernetesRolloutRestart())}

__all__ = ["ACTIONS"]
