"""The response policy for remediation: which alerts lead to which action, under which guards.

```yaml
remediation:
  dry_run: false              # true: decide and record, never act (every policy)
  max_concurrent: 2           # never more than K targets being remediated at once...
  max_concurrent_percent: 25  # ...nor more than P % of the fleet (the smaller wins, at least 1)
  breaker_failures: 3         # M failed attempts in a row open the target's breaker (page)
  backoff: {initial: 10s, max: 5m, reset_after: 10m}   # after a failure, like CrashLoopBackOff
  command_allowlist: [/usr/local/bin/vllm-ctl]          # executables `command` may run
  silences:
    - matchers: {target: tpu-a}
      starts: 2026-12-01T22:00:00Z
      ends: 2026-12-02T02:00:00Z
      comment: kernel upgrade
    - matchers: {pool: spot}
      time_intervals: [weekly-maintenance]   # recurring: a top-level `time_intervals` name
  lease: 30s                  # a running attempt whose owner died is failed within this
  correlation_window: 5m      # one crash, one action: see guards.py (correlated)
  restart_cost:               # expected time to serve after a restart (restart_cost.py)
    cold_above: 5m            # a restart expected slower than this is cold
    learn_from: 5             # the target's last N verified restarts set its expectation
    expect:                   # until a target has restarted: per accelerator, warm and cold
      tpu: {warm: 1m, cold: 25m}    # XLA graphs cached (VLLM_XLA_CACHE_PATH) or compiled again
      gpu: {warm: 3m, cold: 10m}    # torch.compile cache and local weights, or not
  verdicts:                   # did it work? (verdicts.py)
    after: 24h                # fixed: the same failure not back on the target by then
    throughput_ratio: 0.8     # ... and its token throughput at least this share of before
    demote: true              # false: record verdicts, never demote
    demote_runs: 5            # a step whose last 5 verdicts...
    demote_not_fixed: 3       # ...hold 3 not fixed is demoted to approval: required
  policies:
    - name: restart-crashed-vllm
      alerts: [VLLMHBMOutOfMemory, VLLMTargetDown]
      match: {severity: critical}      # label equality, optional
      targets: [tpu-a, tpu-b]          # optional; default every target
      cooldown: 5m                     # after a verified success on the target
      max_per_hour: 3
      allow_cold: false                # restarts expected slower than restart_cost.cold_above
      max_time_to_serve: 5m            # or: the longest expected time to serve it allows
      page_on_cold_start: false        # a cold start noticed on a covered target pages
      approval: none                   # required: park each action until a person approves
      approval_expiry: 15m             # a parked action not approved by then is not run
      steps:                           # tried in order; the next once a step's attempts failed
        - docker_restart: {container: "vllm-{target}", socket: /var/run/docker.sock}
          timeout: 2m
          verify_deadline: 2m
          attempts: 2
```

Label values are substituted into `{label}` placeholders of container and
unit names and of `command` argv templates; the engine refuses values that
are not plain names, so an alert's labels can never inject an option or a path.
Nothing is remediated unless a policy names the alert.
"""

from __future__ import annotations

import os
import re
import tempfile
from datetime import datetime
from typing import Any

from pydantic import Field, field_validator, model_validator

from sentinel.config.base import Duration, PositiveDuration, Strict, problem
from sentinel.config.kubernetes import KubernetesPodRestartConfig, KubernetesRolloutRestartConfig

_NAME = r"^[a-zA-Z0-9_.-]+$"
_PLACEHOLDER = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)\}")
DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"
ACTION_KINDS = ("docker_restart", "systemd_restart", "command", "tpu_node_restart",
                "xla_cache_backup", "kubernetes_pod_restart", "kubernetes_rollout_restart")
WARM_KINDS = ("docker_restart", "systemd_restart", "kubernetes_pod_restart",
              "kubernetes_rollout_restart")


def placeholders(template: str) -> list[str]:
    """The label names a `{label}` template refers to."""
    return _PLACEHOLDER.findall(template)


# libtpu's lock file; a crashed server leaves it behind and the next start then fails.
DEFAULT_LIBTPU_LOCKFILE = os.path.join(tempfile.gettempdir(), "libtpu_lockfile")


class DockerRestartConfig(Strict):
    """Restart a container through the Docker Engine API on its unix socket."""

    container: str
    socket: str = DEFAULT_DOCKER_SOCKET
    stop_timeout_ms: PositiveDuration = Field(30_000, alias="stop_timeout")
    # How long the old process may keep holding the chip after the stop.
    exit_deadline_ms: PositiveDuration = Field(60_000, alias="exit_deadline")
    # A new process that dies this soon (chip still busy) is started again until the deadline.
    settle_ms: PositiveDuration = Field(3_000, alias="settle")
    # A durable copy of the XLA cache (see xla_cache_backup) restored when the cache is cold.
    restore_from: str | None = None
    # Removed once the old process is gone, before starting (a path in the container is
    # mapped through its mounts); null leaves it alone.
    libtpu_lockfile: str | None = DEFAULT_LIBTPU_LOCKFILE


class SystemdRestartConfig(Strict):
    """`systemctl restart UNIT`, after the same warm-cache check on `xla_cache_path`."""

    unit: str
    xla_cache_path: str | None = None  # default: the target's xla_cache_path
    systemctl: str = "systemctl"
    # Removed between `systemctl stop` and `systemctl start`; null leaves it alone.
    libtpu_lockfile: str | None = DEFAULT_LIBTPU_LOCKFILE
    # A `systemctl start` that fails (the chip still held) is retried with backoff.
    start_attempts: int = Field(3, ge=1, le=10)


class CommandConfig(Strict):
    """An argv template, run without a shell; argv[0] must be on the command allow-list."""

    argv: tuple[str, ...] = Field(min_length=1)


class TpuNodeRestartConfig(Strict):
    """Stop and start the target's TPU node (its `tpu:` config); the cold last resort."""

    operation_timeout_ms: PositiveDuration = Field(1_200_000, alias="operation_timeout")


class XlaCacheBackupConfig(Strict):
    """Copy the XLA cache directory to a durable path (backup) or back (restore)."""

    direction: str = "backup"
    source: str | None = None  # default: the target's xla_cache_path
    durable: str

    @field_validator("direction")
    @classmethod
    def _check_direction(cls, v: str) -> str:
        if v not in ("backup", "restore"):
            raise problem("must be backup or restore")
        return v


class ExpectConfig(Strict):
    """How long a restart takes to serve again, warm and cold, before any was measured."""

    warm_ms: PositiveDuration = Field(alias="warm")
    cold_ms: PositiveDuration = Field(alias="cold")


class RestartCostConfig(Strict):
    """What a restart is expected to cost (time to serve again), and what is called cold."""

    cold_above_ms: PositiveDuration = Field(300_000, alias="cold_above")
    learn_from: int = Field(5, ge=1, le=50)
    expect: dict[str, ExpectConfig] = Field(default_factory=lambda: {
        "tpu": ExpectConfig.model_validate({"warm": "1m", "cold": "25m"}),
        "gpu": ExpectConfig.model_validate({"warm": "3m", "cold": "10m"})})

    @field_validator("expect")
    @classmethod
    def _accelerators(cls, v: dict[str, ExpectConfig]) -> dict[str, ExpectConfig]:
        for name in v:
            if name not in ("tpu", "gpu"):
                raise problem("accelerators are tpu and gpu", name)
        for name, default in (("tpu", ("1m", "25m")), ("gpu", ("3m", "10m"))):
            v.setdefault(name, ExpectConfig.model_validate(
                {"warm": default[0], "cold": default[1]}))
        return v


class VerdictConfig(Strict):
    """When a remediation's verdict is due, what counts as fixed, when a step is demoted."""

    after_ms: PositiveDuration = Field(86_400_000, alias="after")
    throughput_ratio: float = Field(0.8, ge=0, le=1)
    # false: verdicts are recorded and counted, but no step is ever demoted.
    demote: bool = True
    demote_runs: int = Field(5, ge=1, le=100)
    demote_not_fixed: int = Field(3, ge=1, le=100)

    @model_validator(mode="after")
    def _within(self) -> VerdictConfig:
        if self.demote_not_fixed > self.demote_runs:
            raise problem("demote_not_fixed cannot exceed demote_runs", "demote_not_fixed")
        return self


class StepConfig(Strict):
    """One rung of a policy's ladder: exactly one action, its deadlines and attempts."""

    docker_restart: DockerRestartConfig | None = None
    systemd_restart: SystemdRestartConfig | None = None
    command: CommandConfig | None = None
    tpu_node_restart: TpuNodeRestartConfig | None = None
    xla_cache_backup: XlaCacheBackupConfig | None = None
    kubernetes_pod_restart: KubernetesPodRestartConfig | None = None
    kubernetes_rollout_restart: KubernetesRolloutRestartConfig | None = None
    timeout_ms: PositiveDuration = Field(120_000, alias="timeout")
    verify: bool = True
    # Warm restarts answer in seconds; a cold one compiles for tens of minutes.
    verify_deadline_ms: PositiveDuration = Field(120_000, alias="verify_deadline")
    attempts: int = Field(1, ge=1, le=10)

    @model_validator(mode="after")
    def _one_action(self) -> StepConfig:
        kinds = [k for k in ACTION_KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise problem(f"a step names exactly one action ({', '.join(ACTION_KINDS)}); "
                          f"got {', '.join(kinds) or 'none'}")
        return self

    @property
    def kind(self) -> str:
        """The action's name, e.g. docker_restart."""
        return next(k for k in ACTION_KINDS if getattr(self, k) is not None)

    @property
    def params(self) -> Any:
        """The action's own settings."""
        return getattr(self, self.kind)


class PolicyConfig(Strict):
    """Which alerts (by name and labels) on which targets lead to which steps."""

    name: str = Field(pattern=_NAME)
    alerts: tuple[str, ...] = Field(min_length=1)
    match: dict[str, str] = Field(default_factory=dict)
    targets: tuple[str, ...] = ()
    dry_run: bool = False
    cooldown_ms: Duration = Field(300_000, alias="cooldown")
    max_per_hour: int = Field(3, ge=1)
    allow_cold: bool = False
    # The longest expected time to serve again a restart may have; unset: no limit with
    # allow_cold, else restart_cost.cold_above.
    max_time_to_serve_ms: PositiveDuration | None = Field(None, alias="max_time_to_serve")
    # A cold start of a covered target, noticed while it happens (collect/coldstart.py),
    # pages on-call on the target's open incident; else it is on the timeline only.
    page_on_cold_start: bool = False
    steps: tuple[StepConfig, ...] = Field(min_length=1)
    # required: an allowed action waits for a person (API, page, CLI, MCP) until it expires.
    approval: str = "none"
    approval_expiry_ms: PositiveDuration = Field(900_000, alias="approval_expiry")

    @field_validator("approval")
    @classmethod
    def _check_approval(cls, v: str) -> str:
        if v not in ("none", "required"):
            raise problem("must be none or required")
        return v

    @model_validator(mode="after")
    def _cold_last(self) -> PolicyConfig:
        for i, step in enumerate(self.steps):
            if step.kind == "tpu_node_restart":
                if not self.allow_cold:
                    raise problem("tpu_node_restart is a cold restart: set allow_cold: true",
                                  "steps", i)
                if not any(s.kind in WARM_KINDS for s in self.steps[:i]):
                    raise problem("tpu_node_restart comes only after a warm restart step "
                                  "(docker_restart or systemd_restart)", "steps", i)
        return self

    def restart_limit_ms(self, cost: RestartCostConfig) -> int | None:
        """The longest expected time to serve a restart under this policy may have (None: any)."""
        if self.max_time_to_serve_ms is not None:
            return self.max_time_to_serve_ms
        return None if self.allow_cold else cost.cold_above_ms

    def applies_to(self, alertname: str, labels: dict[str, str], target: str) -> bool:
        """Whether an alert with these labels on this target falls under the policy."""
        return (alertname in self.alerts
                and (not self.targets or target in self.targets)
                and all(labels.get(k) == v for k, v in self.match.items()))


class BackoffConfig(Strict):
    """Wait after a failed attempt: initial, doubling to max; forgotten after a clean period."""

    initial_ms: PositiveDuration = Field(10_000, alias="initial")
    max_ms: PositiveDuration = Field(300_000, alias="max")
    reset_after_ms: PositiveDuration = Field(600_000, alias="reset_after")


class SilenceConfig(Strict):
    """No remediation for alerts matching every matcher while starts <= now < ends, or
    while one of the named `time_intervals` is active (a recurring window)."""

    matchers: dict[str, str] = Field(min_length=1)
    starts: datetime | None = None
    ends: datetime | None = None
    time_intervals: tuple[str, ...] = ()  # names from the top-level `time_intervals`
    comment: str = ""

    @model_validator(mode="after")
    def _ordered(self) -> SilenceConfig:
        if self.time_intervals:
            if self.starts is not None or self.ends is not None:
                raise problem("give either starts and ends, or time_intervals", "time_intervals")
            return self
        if self.starts is None or self.ends is None:
            raise problem("starts and ends are required (or time_intervals for a recurring "
                          "window)", "starts" if self.starts is None else "ends")
        if self.starts.tzinfo is None or self.ends.tzinfo is None:
            raise problem("starts and ends need a time zone (e.g. 2026-12-01T22:00:00Z)")
        if self.ends <= self.starts:
            raise problem("ends must be after starts", "ends")
        return self


class RemediationConfig(Strict):
    """The `remediation:` section; empty means nothing is ever remediated."""

    dry_run: bool = False
    max_concurrent: int = Field(2, ge=1)
    max_concurrent_percent: float = Field(100.0, gt=0, le=100)
    breaker_failures: int = Field(3, ge=1)
    backoff: BackoffConfig = BackoffConfig.model_validate({})
    command_allowlist: tuple[str, ...] = ()
    silences: tuple[SilenceConfig, ...] = ()
    policies: tuple[PolicyConfig, ...] = ()
    # A running attempt whose owner stops renewing this lease is failed and its slot freed.
    lease_ms: PositiveDuration = Field(30_000, alias="lease")
    # A verified success on a target covers incidents on it that began before it was verified
    # and at most this long before the action started (one crash, one action).
    correlation_window_ms: Duration = Field(300_000, alias="correlation_window")
    restart_cost: RestartCostConfig = RestartCostConfig.model_validate({})
    verdicts: VerdictConfig = VerdictConfig.model_validate({})

    @field_validator("command_allowlist")
    @classmethod
    def _absolute(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for i, exe in enumerate(v):
            if not exe.startswith("/"):
                raise problem("allow-listed executables must be absolute paths", i)
        return v

    @model_validator(mode="after")
    def _commands_allowed(self) -> RemediationConfig:
        names = set()
        for p_i, policy in enumerate(self.policies):
            if policy.name in names:
                raise problem(f"duplicate policy name {policy.name!r}", "policies", p_i, "name")
            names.add(policy.name)
            for s_i, step in enumerate(policy.steps):
                if step.command is not None and step.command.argv[0] not in self.command_allowlist:
                    raise problem("argv[0] is not in remediation.command_allowlist",
                                  "policies", p_i, "steps", s_i, "command", "argv")
        return self


def check_against_targets(rem: RemediationConfig, targets: dict[str, Any]) -> None:
    """Cross-checks with the targets: known names, TPU config and cache paths where needed."""
    for p_i, policy in enumerate(rem.policies):
        for t_i, name in enumerate(policy.targets):
            if name not in targets:
                raise problem(f"unknown target {name!r}", "remediation", "policies", p_i,
                              "targets", t_i)
        covered = [targets[n] for n in (policy.targets or tuple(targets))]
        for s_i, step in enumerate(policy.steps):
            where = ("remediation", "policies", p_i, "steps", s_i, step.kind)
            if step.kind == "tpu_node_restart" and any(t.tpu is None for t in covered):
                raise problem("every target of the policy needs a tpu: section", *where)
            own = getattr(step.params, "xla_cache_path", getattr(step.params, "source", ""))
            # A GPU server has no XLA cache: its restart's warmth is found otherwise.
            needs = [t for t in covered if step.kind == "xla_cache_backup"
                     or getattr(t, "accelerator", "auto") != "gpu"]
            if step.kind in ("systemd_restart", "xla_cache_backup") and own is None \
                    and any(t.xla_cache_path is None for t in needs):
                raise problem("set xla_cache_path here or on every target of the policy", *where)
