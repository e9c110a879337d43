"""What every action is: a read-only `check` (what would be done, or why not) and `run`.

One file per action in `actions/` implements `Action`. `check` has no side
effect, so dry runs and refusals use it too; `run` acts within
`ctx.timeout_s` and returns an `Outcome` instead of raising. Label values
reach container names, unit names and argv only through `render`, which
refuses anything but a plain name.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sentinel.respond.remediate.guards import Reason

# A label value fit for a name or an argv element: no leading '-', no '/', no spaces.
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@=+-]*$")
_PLACEHOLDER = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)\}")


class TemplateError(ValueError):
    """A template names a label the alert lacks, or a label value is not a plain name."""


def render(template: str, labels: Mapping[str, str]) -> str:
    """`{label}` placeholders replaced by the alert's label values (checked to be plain names)."""
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in labels:
            raise TemplateError(f"label {name!r} is not on the alert")
        value = labels[name]
        if not _SAFE_VALUE.match(value):
            raise TemplateError(f"label {name}={value!r} is not a plain name")
        return value
    return _PLACEHOLDER.sub(one, template)


@dataclass(frozen=True, slots=True)
class TargetInfo:
    """What an action may know of its target (from the config)."""

    name: str
    url: str
    xla_cache_path: str | None = None
    tpu: Any = None  # sentinel.config.sources.TpuConfig
    # The target's own labels (a discovered pod's namespace and pod among them): an alert
    # aggregated `by (target)` lost them, and a pod action still needs them.
    labels: Mapping[str, str] = field(default_factory=dict)
    accelerator: str = "auto"  # the target's `accelerator:` key (auto: find out)


@dataclass(frozen=True, slots=True)
class ActionContext:
    """Everything one action needs: target, alert labels, its settings, time budget, cold policy."""

    target: TargetInfo
    labels: Mapping[str, str]
    params: Any  # the step's action settings (sentinel.config.remediation.*Config)
    timeout_s: float
    allow_cold: bool = False
    # When the failure the action answers began (the alert's active time); None: unknown.
    # A container started after it was restarted by someone else since (docker_restart).
    since_ms: int | None = None

    def deadline(self) -> float:
        """A monotonic deadline `timeout_s` from now."""
        return time.monotonic() + self.timeout_s


@dataclass(frozen=True, slots=True)
class Check:
    """What `run` would do (summary, data), or why it must not (reason)."""

    ok: bool
    summary: str
    reason: Reason | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def refuse(cls, reason: Reason, summary: str, **data: Any) -> Check:
        """A refusal with its reason."""
        return cls(False, summary, reason, dict(data))


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an action went: ok, a one-line detail, and data for the timeline."""

    ok: bool
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


class Action(Protocol):
    """An allow-listed remediation. `kind` is its config key (docker_restart, ...)."""

    kind: str

    def check(self, ctx: ActionContext) -> Check:
        """Read-only: what `run` would do now, or why it must not."""
        ...

    def run(self, ctx: ActionContext) -> Outcome:
        """Act within `ctx.timeout_s`; never raises for an expected failure."""
        ...
