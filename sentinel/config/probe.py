"""Probe configuration: how often and how each target's serving path is checked.

```yaml
probe_interval: 15s                # global default; 0 turns probing off
probe_canary_concurrency: 64       # canary completions in flight across the fleet, at most
targets:
  - name: gemma-26b
    url: http://10.0.0.5:8000
    probe:
      interval: 15s                # default: probe_interval
      timeout: 10s                 # default: 10s, at most the interval
      canary: true                 # the streaming canary (TTFT); false: /health, /v1/models only
      expect: ""                   # when set, the canary's answer must contain this text
      skip_canary_when_busy: true  # no canary while the target's own token counters move
      api_key_file: /run/secrets/vllm-key   # or api_key: ${VLLM_API_KEY}
```

Pods found by `kubernetes_sd` are probed too, with these defaults and the
global `probe_interval`.

The defaults follow a field fix of "up but not serving" stalls (issue 12): a
probe every 10-15 s with a 10 s timeout caught stalls in about two minutes
without false restarts, where 1-2 s timeouts restarted busy servers 8+ times
a day.
"""

from __future__ import annotations

from pydantic import Field, ValidationInfo, model_validator

from sentinel.config.base import Duration, PositiveDuration, Strict, problem, with_key_from_file

DEFAULT_PROBE_INTERVAL_MS = 15_000
DEFAULT_PROBE_TIMEOUT_MS = 10_000
# 64: at 1,000 idle targets probed every 15 s, 67 canaries are due a second, ~33 at
# once in a 250 ms slot. At the seeds' idle time to first token (0.3 s), a cap of 4
# left 85 % of them unsent and 16 left 39 %; 64 sent them all (a one-off
# bench, since removed; the figures are its conclusion).
# Each target has one canary in flight at most, so the cap bounds Sentinel's burst,
# not the load on any one server.
DEFAULT_CANARY_CONCURRENCY = 64


class ProbeConfig(Strict):
    """A target's probe settings; unset ones come from the global `probe_interval`."""

    interval_ms: Duration | None = Field(None, alias="interval")
    timeout_ms: PositiveDuration | None = Field(None, alias="timeout")
    canary: bool = True
    expect: str = ""
    skip_canary_when_busy: bool = True
    api_key: str = Field("", repr=False)  # secret
    api_key_file: str | None = None

    @model_validator(mode="after")
    def _read_key_file(self, info: ValidationInfo) -> ProbeConfig:
        if self.interval_ms is not None and self.interval_ms < 0:
            raise problem("must not be negative", "interval")
        return with_key_from_file(self, info.context)


DEFAULT_PROBE = ProbeConfig.model_validate({})


def effective_probe(probe: ProbeConfig | None, global_interval_ms: int) -> tuple[int, int]:
    """(interval, timeout) in ms for a target; interval 0 means the target is not probed."""
    p = probe or DEFAULT_PROBE
    interval = global_interval_ms if p.interval_ms is None else p.interval_ms
    timeout = p.timeout_ms if p.timeout_ms is not None else DEFAULT_PROBE_TIMEOUT_MS
    if interval and p.timeout_ms is None:
        timeout = min(timeout, interval)
    return interval, timeout
