"""What a restart will cost: the expected time until the target serves again, and whether a
policy allows it. Pure: the facts are passed in.

A restart's cost is set by what the accelerator must redo. On a TPU that is
the XLA compilation (20+ minutes unless `VLLM_XLA_CACHE_PATH` holds the
graphs); on a GPU it is loading the weights (local disk or a download),
`torch.compile` (its cache under `VLLM_CACHE_ROOT`) and CUDA-graph capture.
The action's read-only check reports what it can see (`Warmth`); the
expectation is then learned from the target's own past verified restarts
(`served_after_s`), and only before there are any taken from the configured
expectation for its accelerator. A known-cold restart is judged by past cold
restarts only: a TPU whose XLA cache was emptied is not fast because its
warm restarts were.

The refusal reads the same for every accelerator: "expected time to serve
X (basis) is more than policy P allows (Y)".
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sentinel.config.remediation import ExpectConfig, RestartCostConfig

TPU, GPU, UNKNOWN = "tpu", "gpu", "unknown"
# The data keys an action's check fills (stored on the attempt, so history can read them).
KEY_ACCELERATOR, KEY_WARM, KEY_WHY = "accelerator", "warm", "warm_why"


@dataclass(frozen=True, slots=True)
class Warmth:
    """What the action saw: the accelerator, whether the restart is warm (None: nothing
    tells), and why, in a few words."""

    accelerator: str = UNKNOWN
    warm: bool | None = None
    why: str = ""

    @classmethod
    def of(cls, data: Mapping[str, object]) -> Warmth:
        """The warmth an action's check data reports (its KEY_* entries)."""
        warm = data.get(KEY_WARM)
        return cls(str(data.get(KEY_ACCELERATOR) or UNKNOWN),
                   warm if isinstance(warm, bool) else None, str(data.get(KEY_WHY) or ""))


@dataclass(frozen=True, slots=True)
class PastRestart:
    """One verified restart of the target: how long it took to serve, and if it was warm."""

    served_after_ms: int
    warm: bool | None = None


@dataclass(frozen=True, slots=True)
class Expectation:
    """The expected time to serve again, whether that counts as cold, and on what it rests."""

    ms: int
    basis: str
    learned: int = 0  # how many past restarts it rests on (0: the configured expectation)


@dataclass(frozen=True, slots=True)
class Judgement:
    """Whether the policy allows the restart, with the expectation and the limit."""

    allowed: bool
    expected: Expectation
    limit_ms: int | None
    detail: str


def fmt(ms: int) -> str:
    """A duration for people: 45s, 3m, 1h5m (no more precision than an expectation has)."""
    s = round(ms / 1000)
    if s < 120:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s}s" if s and m < 10 else f"{m}m"
    h, m = divmod(m, 60)
    return f"{h}h{m}m" if m else f"{h}h"


def configured(accelerator: str, cfg: RestartCostConfig) -> ExpectConfig:
    """The configured expectation for an accelerator (unknown: the slower of the known)."""
    if accelerator in cfg.expect:
        return cfg.expect[accelerator]
    return max(cfg.expect.values(), key=lambda e: (e.warm_ms, e.cold_ms))


def expect(w: Warmth, history: Sequence[PastRestart], cfg: RestartCostConfig) -> Expectation:
    """The expected time to serve after this restart.

    The median of the target's last `learn_from` verified restarts of the same kind
    (cold ones when this one is known cold, the others otherwise); the configured
    expectation for its accelerator while it has none.
    """
    cold = w.warm is False
    same = [h.served_after_ms for h in history if (h.warm is False) == cold][:cfg.learn_from]
    kind = "cold" if cold else "warm"
    if same:
        ms = int(statistics.median(same))
        which = f"its last verified {kind} restart" if len(same) == 1 else \
            f"median of its last {len(same)} verified {kind} restarts"
        return Expectation(ms, f"learned: {which}", len(same))
    exp = configured(w.accelerator, cfg)
    ms = exp.cold_ms if cold else exp.warm_ms
    name = w.accelerator if w.accelerator != UNKNOWN else "an unknown accelerator"
    return Expectation(ms, f"configured {kind} expectation for {name}; no verified restart "
                       "yet")


def judge(w: Warmth, history: Sequence[PastRestart], cfg: RestartCostConfig,
          limit_ms: int | None, policy: str) -> Judgement:
    """Whether a restart expected to take this long may run under `policy`'s limit."""
    e = expect(w, history, cfg)
    seen = f"; {w.why}" if w.why else ""
    if limit_ms is None or e.ms <= limit_ms:
        return Judgement(True, e, limit_ms, f"expected time to serve {fmt(e.ms)} ({e.basis}"
                         f"{seen})")
    return Judgement(False, e, limit_ms, f"expected time to serve {fmt(e.ms)} ({e.basis}"
                     f"{seen}) is more than policy {policy} allows ({fmt(limit_ms)})")
