"""TPU-only settings on GPU targets: what `sentinel check config` warns about (errors with
`--strict`).

A target is a GPU where its `accelerator: gpu` says so (the container tells
the running daemon; a static check has only the key). On it, these assume a
TPU and do nothing useful or something wrong: an `xla_cache_path` or a `tpu:`
section on the target; a policy step covering it that is `tpu_node_restart` or
`xla_cache_backup`, a `docker_restart` with `restore_from` (an XLA cache copy),
a `systemd_restart` with `xla_cache_path`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Assumption:
    """One TPU-only setting on a GPU target, and where it is in the file."""

    path: KeyPath
    message: str


def tpu_assumptions(config: Any) -> list[Assumption]:
    """Every TPU-only setting that reaches a target configured `accelerator: gpu`."""
    gpus = {t.name for t in config.targets if t.accelerator == "gpu"}
    out = []
    for i, t in enumerate(config.targets):
        if t.name not in gpus:
            continue
        if t.xla_cache_path:
            out.append(Assumption(("targets", i, "xla_cache_path"), f"target {t.name} is a GPU "
                                  "(accelerator: gpu): an XLA cache is TPU-only"))
        if t.tpu is not None:
            out.append(Assumption(("targets", i, "tpu"), f"target {t.name} is a GPU "
                                  "(accelerator: gpu): a tpu: section is TPU-only"))
    for p_i, policy in enumerate(config.remediation.policies):
        covered = sorted(gpus & set(policy.targets or [t.name for t in config.targets]))
        if not covered:
            continue
        for s_i, step in enumerate(policy.steps):
            why = _tpu_only(step)
            if why:
                out.append(Assumption(
                    ("remediation", "policies", p_i, "steps", s_i, step.kind),
                    f"policy {policy.name} step {s_i + 1} {why}, but covers GPU target(s) "
                    f"{', '.join(covered)}"))
    return out


def _tpu_only(step: Any) -> str:
    if step.kind in ("tpu_node_restart", "xla_cache_backup"):
        return f"({step.kind}) is TPU-only"
    if step.kind == "docker_restart" and step.params.restore_from:
        return "restores an XLA cache (restore_from)"
    if step.kind == "systemd_restart" and step.params.xla_cache_path:
        return "checks an XLA cache (xla_cache_path)"
    return ""
