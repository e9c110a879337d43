"""Run one example case (examples_cases.py) end to end and judge what reached people.

A case: the example's daemon starts on its stage and sees the servers serve; at t0 the
scenario's failure begins; where the scenario says so a person (or the server itself)
heals it; the run ends once what it waits for arrived (a resolved message after the
server served again, or act-first's notice) or a deadline passed, then waits a little
longer for anything extra (a second page, a late resolve). The failing server is polled
every 0.1 s, so "serving again" is what the server did, not what the script meant.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from examples_cases import BACK_S, NA, REFUSED_DOWN_S, Stage, stage
from examples_config import group_interval_s
from examples_count import Span, Told, count, false_resolves, resolved
from fixtures_e2e import wait_for

from sentinel.config.notify import (
    DEFAULT_ACT_FIRST_GRACE_MS,
    DEFAULT_GROUP_WAIT_MS,
)
from sentinel.config.probe import DEFAULT_PROBE_INTERVAL_MS
from sentinel.daemon.app import App
from sentinel.demo.rules import self_alerts

CHAT_EXAMPLES = ("gpu-fleet",)  # the examples with an act_first receiver


@dataclass
class Result:
    """What one case sent and when its server failed."""

    example: str
    scenario: str
    told: Told = field(default_factory=Told)
    spans: list[Span] = field(default_factory=list)
    t0: float = 0.0
    end: float = 0.0

    @property
    def served_again(self) -> float | None:
        """When the server first served again after t0 (None: not within the run)."""
        return self.spans[0][1] if self.spans else None

    @property
    def resolved_after_s(self) -> float | None:
        """The first resolved message's arrival, seconds after the server served again."""
        if self.served_again is None or not self.told.resolved:
            return None
        return min(self.told.resolved) - self.served_again

    @property
    def false_resolves(self) -> int:
        """Resolved messages sent while the server was failing."""
        return false_resolves(self.told, self.spans)

    @property
    def silent(self) -> int:
        """1 when a person had to hear of this failure (not fixed) and no page came."""
        return int(self.scenario != "fixed" and self.told.pages == 0)

    def problems(self, scale: int, evaluation_s: float) -> list[str]:
        """How this case breaks issue 48's expectations (empty: it keeps them)."""
        out = []
        want_pages = 0 if self.scenario == "fixed" else 1
        if self.told.pages != want_pages:
            out.append(f"{self.told.pages} pages, want {want_pages}")
        want_notices = int(self.scenario == "fixed" and self.example in CHAT_EXAMPLES)
        if self.told.notices != want_notices:
            out.append(f"{self.told.notices} fixed notices, want {want_notices}")
        if self.false_resolves:
            out.append(f"{self.false_resolves} false resolves")
        limit = limit_s(self.example, scale, evaluation_s)
        if self.scenario != "fixed" and self.told.pages:
            after = self.resolved_after_s
            if after is None:
                out.append("no resolved message after the server served again")
            elif self.scenario == "no-policy" and after > limit:
                out.append(f"resolved {after:.1f}s after serving, more than a probe + one "
                           f"evaluation + group_interval ({limit:.1f}s)")
        return out


def limit_s(example: str, scale: int, evaluation_s: float) -> float:
    """One evaluation + the example's group_interval, after Sentinel can see the server
    serve: its next health probe (the examples keep the 15 s default; 1 s when scaled)."""
    probe_s = DEFAULT_PROBE_INTERVAL_MS / 1000 if scale == 1 else 1.0
    return probe_s + evaluation_s + group_interval_s(example) / scale


def run_case(example: str, scenario: str, folder: Path, scale: int, *, evaluation_s: float,
             warm_up_s: float, slack_s: float) -> Result:
    """Stage the case, fail it at t0, heal it on its clock, and count what people got."""
    assert (example, scenario) not in NA, NA[(example, scenario)]
    s, app = stage(example, scenario, folder, scale)
    result = Result(example, scenario)
    stop = threading.Event()
    try:
        wait_for(lambda: s.ready(app) and _all_up(app), 120, "the daemon to see every target up")
        time.sleep(warm_up_s)  # a little healthy history before the failure
        poller = threading.Thread(target=_poll, args=(s, result.spans, stop), daemon=True)
        result.t0 = time.monotonic()
        poller.start()
        s.fail()
        _script(s, result, scale, evaluation_s, slack_s)
    finally:
        stop.set()
        result.end = time.monotonic()
        result.told = count(s.pager.received, s.chat.received, self_alerts())
        s.stop()
    return result


def _script(s: Stage, r: Result, scale: int, evaluation_s: float, slack_s: float) -> None:
    heal_at = None if s.heal_after_s is None else r.t0 + s.heal_after_s / scale
    healed = False
    grace_s = DEFAULT_ACT_FIRST_GRACE_MS / 1000 / scale
    wait_s = DEFAULT_GROUP_WAIT_MS / 1000 / scale
    # The latest a case can be done: healed (or the policy's grace over) + a resolve's limit.
    last = (heal_at or r.t0 + grace_s) + limit_s(s.example, scale, evaluation_s) + slack_s
    settled: float | None = None
    while time.monotonic() < last:
        now = time.monotonic()
        if heal_at is not None and not healed and now >= heal_at:
            s.heal()
            healed = True
        if settled is None and _done(s, r):
            settled = now
        # A page would come by act-first's grace + group_wait: wait past it, and a little
        # past what the case waited for (a second page, a late resolve).
        if settled is not None and now >= max(settled + min(slack_s, 4 * evaluation_s),
                                              r.t0 + grace_s + wait_s + 2 * evaluation_s):
            return
        time.sleep(0.1)


def _done(s: Stage, r: Result) -> bool:
    """What the case waits for has arrived: a resolved message after serving again; for a
    fixed crash, serving again and (where the example has chat) the notice."""
    served = r.served_again
    if served is None:
        return False
    pager, chat = list(s.pager.received), list(s.chat.received)
    if s.scenario == "fixed":
        return s.example not in CHAT_EXAMPLES or any(
            "FIXED BY SENTINEL" in str(b) for _, b, _ in chat)
    return any(t >= served and resolved(b, self_alerts()) for t, b, _ in pager)


def _poll(s: Stage, spans: list[Span], stop: threading.Event) -> None:
    assert s.server is not None
    while not stop.is_set():
        st, now = s.server.state, time.monotonic()
        failing = st.down or not st.healthy
        if failing and (not spans or spans[-1][1] is not None):
            spans.append((now, None))
        elif not failing and spans and spans[-1][1] is None:
            spans[-1] = (spans[-1][0], now)
        stop.wait(0.1)


def _all_up(app: App) -> bool:
    if app.engine is None:
        return False
    vec = app.engine.query("up", int(time.time() * 1000))
    return bool(vec) and all(v.value == 1 for v in vec)




__all__ = ["BACK_S", "REFUSED_DOWN_S", "Result", "limit_s", "run_case"]
