"""Verdicts on remediations and demotion of steps that do not fix (issue 50), with Sentinel's
clock driven: nobody waits 24 hours. The engine acts on a real simulator behind a Docker
socket, over a real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from test_remediate_engine import Clock, Pages, candidate, remediation

from sentinel.config.remediation import VerdictConfig
from sentinel.incidents import queries
from sentinel.incidents.convert import ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident
from sentinel.incidents.models_remediation import Verdict
from sentinel.respond.remediate import state
from sentinel.respond.remediate.base import TargetInfo
from sentinel.respond.remediate.engine import Engine, Prepared
from sentinel.respond.remediate.metrics import RemediationMetrics
from sentinel.respond.remediate.verdict_job import DEMOTED, VerdictJob, promote, steps
from sentinel.respond.remediate.verdicts import Facts, decide, demotion
from sentinel.sim.container import ContainerSpec
from sentinel.sim.docker_socket import serve_container
from sentinel.sim.server import start_sim

T0 = 1_800_000_000_000
H = 3_600_000
CFG = VerdictConfig.model_validate({})  # 24 h, 0.8, demote 3 of 5


def facts(**kw: object) -> Facts:
    return replace(Facts(True, T0, "VLLMEngineDead"), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("f", "now_ms", "expected", "words"), [
    (facts(ok=False), T0, Verdict.FAILED, "failed"),
    (facts(recurred_ms=T0 + 40 * 60_000, recurred_incident=7), T0 + H, Verdict.RECURRED,
     "came back 40m after the fix (incident #7)"),
    (facts(overridden_ms=T0 + H), T0 + 2 * H, Verdict.OVERRIDDEN, "a person acted"),
    # The first of the two decides.
    (facts(recurred_ms=T0 + 2 * H, recurred_incident=7, overridden_ms=T0 + H), T0 + 3 * H,
     Verdict.OVERRIDDEN, "a person"),
    (facts(), T0 + 23 * H, None, ""),  # not due yet
    (facts(), T0 + 24 * H, Verdict.FIXED, "did not come back in 24h"),
    (facts(recurred_ms=T0 + 25 * H, recurred_incident=7), T0 + 26 * H, Verdict.FIXED,
     "did not come back"),  # after the window: a new failure, not this one back
    (facts(throughput_before=100.0, throughput_now=95.0), T0 + 24 * H, Verdict.FIXED,
     "throughput 95% of its pre-incident level"),
    (facts(throughput_before=100.0, throughput_now=40.0), T0 + 24 * H, Verdict.FAILED,
     "throughput is 40% of its pre-incident level"),
])
def test_the_verdict(f, now_ms, expected, words) -> None:
    got = decide(f, now_ms, CFG)
    if expected is None:
        assert got is None
        return
    assert got is not None and got[0] is expected and words in got[1], got


@pytest.mark.parametrize(("recent", "demoted"), [
    ([], False),
    (["recurred", "recurred"], False),
    (["recurred", "failed", "recurred"], True),
    (["fixed", "recurred", "fixed", "recurred", "fixed"], False),
    (["fixed", "recurred", "overridden", "recurred", "fixed"], True),
    # Only the last 5 count.
    (["fixed", "fixed", "fixed", "recurred", "recurred", "recurred", "recurred"], False),
])
def test_demotion_when_most_recent_runs_are_not_fixed(recent, demoted) -> None:
    why = demotion(recent, CFG)
    assert (why is not None) is demoted
    if why:
        assert "not fixed" in why and "approval: required" in why


# -- with the engine, a simulator and the database -----------------------------------------


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="snt") as d:
        yield Path(d)


@pytest.fixture
def warm_sim(tmp_path: Path, sock_dir: Path) -> Iterator[object]:
    cache = tmp_path / "xla"
    cache.mkdir()
    (cache / "graph.bin").write_bytes(b"\0" * 64)
    sim = start_sim()
    sock = serve_container(sim, ContainerSpec(xla_cache=str(cache), release_s=0,
                                              warm_start_s=0.1), str(sock_dir / "d.sock"))
    yield sim
    sock.stop()
    sim.stop()


def _open(db: Database, at_ms: int, alertname: str = "VLLMEngineDead") -> int:
    with db.session() as s:
        inc = Incident(group_key=f"{alertname}/tpu-a", alertname=alertname, target="tpu-a",
                       status="open", severity="critical", summary="",
                       labels={"category": "engine_dead"} if "Dead" in alertname else {},
                       opened_at=ms_to_dt(at_ms),
                       resolved_at=None, updated_at=ms_to_dt(at_ms))
        s.add(inc)
        s.flush()
        return inc.id


def _close(db: Database, incident_id: int, at_ms: int) -> None:
    with db.session() as s:
        inc = s.get(Incident, incident_id)
        inc.status, inc.resolved_at = "resolved", ms_to_dt(at_ms)


class Rig:
    """The engine and the verdict job on one clock, pager and metrics registry."""

    def __init__(self, db: Database, sim: object, sock: str, demote: bool = True) -> None:
        self.db = db
        # Every restart here must serve: a generous verify deadline (0.3 s ran out at load
        # 15 on 2 cores, issue 53); it ends as soon as the simulator serves.
        self.cfg = remediation(sock, "cooldown: 0s\n    max_per_hour: 100",
                               verify_deadline="120s",
                               verdicts={"after": "24h", "demote": demote})
        self.clock, self.pages = Clock(T0), Pages()
        self.registry = CollectorRegistry()
        metrics = RemediationMetrics(self.registry)
        targets = {"tpu-a": TargetInfo("tpu-a", sim.url)}  # type: ignore[attr-defined]
        self.engine = Engine(self.cfg, targets, db, self.pages, metrics, clock=self.clock)
        self.job = VerdictJob(db, self.cfg, self.pages, metrics.verdicts)

    def crash(self, at_ms: int) -> object:
        """A crash at `at_ms`: an incident, and the engine's answer (run to its end)."""
        self.clock.ms = at_ms
        incident = _open(self.db, at_ms)
        c = replace(candidate(self.cfg, incident), alertname="VLLMEngineDead",
                    active_at_ms=at_ms)
        prepared = self.engine.prepare(c)
        if isinstance(prepared, Prepared):
            result = self.engine.execute(prepared)
            assert result.ok, result.detail
            _close(self.db, incident, at_ms)
        return prepared

    def count(self, verdict: str) -> float:
        return self.registry.get_sample_value("sentinel_remediation_verdicts_total", {
            "policy": "restart", "action": "docker_restart", "verdict": verdict}) or 0.0


@pytest.mark.integration
def test_a_crash_that_keeps_coming_back_is_recurred_then_the_step_is_demoted(
        incident_db: Database, warm_sim, sock_dir: Path) -> None:
    rig = Rig(incident_db, warm_sim, str(sock_dir / "d.sock"))
    every = 40 * 60_000  # the crash comes back every 40 minutes
    for i in range(3):  # each crash after the first is the previous one coming back
        assert isinstance(rig.crash(T0 + i * every), Prepared)
    # The third restart's crash comes back too (incident at 120 min).
    incident = _open(incident_db, T0 + 3 * every)
    judged = rig.job.run(T0 + 3 * every + 60_000)
    verdicts = [a.verdict for a in state.attempts(incident_db)]
    assert verdicts == ["recurred"] * 3, verdicts
    assert all("came back 40m after the fix" in r.detail for r in judged)
    assert rig.count("recurred") == 3 and rig.count("fixed") == 0
    # 3 of the last 3 runs not fixed: demoted, with one note and one (warning) notice.
    assert [r.demoted is not None for r in judged] == [False, False, True]
    (step,) = steps(incident_db)
    assert (step.policy, step.step) == ("restart", 0) and step.demoted_at is not None
    demoted = [p for p in rig.pages.sent if p[1] == DEMOTED]
    assert len(demoted) == 1 and demoted[0][3]["severity"] == "warning"
    assert "3 of its last 3 runs were not fixed (3 recurred)" in demoted[0][2]
    notes = [e for i in queries.list_incidents(incident_db)
             for e in queries.get_incident(incident_db, i.id).timeline
             if e.kind == "action" and e.data.get("phase") == "demoted"]
    assert len(notes) == 1
    assert rig.job.run(T0 + 3 * every + 120_000) == []  # nothing judged twice, told once
    assert len([p for p in rig.pages.sent if p[1] == DEMOTED]) == 1

    # The next incident is parked for a person instead of acted on.
    rig.clock.ms = T0 + 3 * every + 180_000
    parked = rig.engine.prepare(replace(candidate(rig.cfg, incident),
                                        alertname="VLLMEngineDead", active_at_ms=rig.clock.ms))
    assert not isinstance(parked, Prepared) and "approval #" in parked.detail, parked
    assert len(warm_sim.container.times("POST start")) == 3  # type: ignore[attr-defined]

    # A person promotes it back: the step acts on its own again.
    assert promote(incident_db, "restart", 0, "alice", rig.clock.ms)
    assert not promote(incident_db, "restart", 0, "alice", rig.clock.ms)  # once
    _close(incident_db, incident, rig.clock.ms)
    assert isinstance(rig.crash(T0 + 4 * every), Prepared)


@pytest.mark.integration
def test_with_demote_false_verdicts_are_recorded_and_nothing_is_demoted(
        incident_db: Database, warm_sim, sock_dir: Path) -> None:
    rig = Rig(incident_db, warm_sim, str(sock_dir / "d.sock"), demote=False)
    for i in range(4):
        assert isinstance(rig.crash(T0 + i * 40 * 60_000), Prepared)
    judged = rig.job.run(T0 + 4 * 40 * 60_000)
    assert [r.verdict for r in judged] == [Verdict.RECURRED] * 3
    assert steps(incident_db) == [] and not [p for p in rig.pages.sent if p[1] == DEMOTED]
    assert rig.count("recurred") == 3


@pytest.mark.integration
def test_a_fix_that_holds_is_fixed_and_nothing_changes(incident_db: Database, warm_sim,
                                                       sock_dir: Path) -> None:
    rig = Rig(incident_db, warm_sim, str(sock_dir / "d.sock"))
    assert isinstance(rig.crash(T0), Prepared)
    # Another failure of another kind on the target is not this one coming back.
    _close(incident_db, _open(incident_db, T0 + H, "VLLMHighTTFT"), T0 + H)
    assert rig.job.run(T0 + 23 * H) == []  # not due yet
    (judged,) = rig.job.run(T0 + 24 * H + 1)
    assert judged.verdict is Verdict.FIXED and judged.demoted is None
    (attempt,) = state.attempts(incident_db)
    assert attempt.verdict == "fixed" and "did not come back in 24h" in attempt.verdict_detail
    assert rig.count("fixed") == 1 and rig.count("recurred") == 0
    assert steps(incident_db) == [] and [p for p in rig.pages.sent if p[1] == DEMOTED] == []
    detail = queries.get_incident(incident_db, attempt.incident_id)
    (note,) = [e for e in detail.timeline if e.kind == "action"
               and e.data.get("phase") == "verdict"]
    assert note.data["verdict"] == "fixed"
    # The next crash (two days on) is acted on as before.
    assert isinstance(rig.crash(T0 + 48 * H), Prepared)


# -- the daemon: API, metric, page, CLI ------------------------------------------------------


@pytest.mark.integration
def test_verdicts_and_promotion_through_the_api_the_page_the_metric_and_the_cli(
        tmp_path: Path, sock_dir: Path, sink, capsys) -> None:
    import httpx
    from api_helpers import READ_TOKEN, WRITE_TOKEN, auth, start_rig, wait_log_source
    from fixtures_e2e import wait_for

    from sentinel.cli import main
    from sentinel.incidents.models_remediation import RemediationStep
    from sentinel.respond.remediate.verdict_job import demoted_step

    rig = start_rig(tmp_path, sock_dir, sink.url, tokens=True)
    try:
        wait_log_source(rig)

        def serving_tokens() -> bool:  # the simulator's own traffic, as the store sees it
            r = httpx.get(f"{rig.url}/api/v1/query", params={
                "query": 'sum(rate(vllm:generation_tokens_total{target="tpu-a"}[5m]))'}).json()
            result = r["data"]["result"]
            return bool(result) and float(result[0]["value"][1]) > 0
        wait_for(serving_tokens, 60, "a token throughput before the crash")
        rig.crash()
        db = rig.app.pipeline.tracker.db
        (attempt,) = wait_for(lambda: [a for a in state.attempts(db) if a.status != "running"],
                              60, "the restart to finish")
        assert attempt.status == "succeeded"
        # Its pre-incident throughput, read through the rules' query backend at the claim.
        assert attempt.data["throughput_before"] > 0
        remediator = rig.app.pipeline.remediator
        assert remediator.judge() == []  # the daemon's own clock: not due for 24 h
        # Sentinel's clock a day on: the job judges what is due then.
        later = dt_ms(attempt.finished_at) + 24 * H + 1
        (judged,) = remediator.verdicts.run(later)
        assert judged.verdict is Verdict.FIXED
        metrics = httpx.get(f"{rig.url}/metrics").text
        assert 'sentinel_remediation_verdicts_total{action="docker_restart",' \
               'policy="restart-on-hbm-oom",verdict="fixed"} 1.0' in metrics
        body = httpx.get(f"{rig.url}/api/v1/remediation/verdicts",
                         params={"until": str(later / 1000 + 1)}).json()
        (row,) = body["by_policy"]
        assert (row["fixed"], row["recurred"], row["fixed_share"]) == (1, 0, 1.0)

        with db.session() as s:  # a step demoted earlier (how is test_a_crash_that_keeps...)
            s.add(RemediationStep(policy="restart-on-hbm-oom", step=0,
                                  demoted_at=ms_to_dt(later), demoted_reason="3 of 3 not fixed",
                                  updated_at=ms_to_dt(later)))
        page = httpx.get(f"{rig.url}/stats").text
        assert "Which fixes work" in page and "3 of 3 not fixed" in page
        assert "promote-restart-on-hbm-oom-1" not in page  # no write session: a login link
        url = f"{rig.url}/api/v1/remediation/policies/restart-on-hbm-oom/steps/1/promote"
        assert httpx.post(url, headers=auth(READ_TOKEN)).status_code == 403
        assert demoted_step(db, "restart-on-hbm-oom", 0)
        r = httpx.post(url, headers=auth(WRITE_TOKEN))
        assert r.status_code == 200 and r.json()["promoted"] is True
        assert not demoted_step(db, "restart-on-hbm-oom", 0)
        assert httpx.post(url, headers=auth(WRITE_TOKEN)).status_code == 409
        steps_now = httpx.get(f"{rig.url}/api/v1/remediation/verdicts").json()["steps"]
        assert steps_now[0]["promoted_by"] == "oncall-lead" and not steps_now[0]["demoted"]

        # The CLI: the same listing, and a promotion audited as cli:<user>.
        with db.session() as s:
            s.get(RemediationStep, ("restart-on-hbm-oom", 0)).demoted_at = ms_to_dt(later)
        database = f"sqlite:///{tmp_path / 'sentinel.db'}"
        capsys.readouterr()
        assert main(["verdicts", "list", "--database", database]) == 0
        out = capsys.readouterr().out
        assert "DEMOTED" in out and "restart-on-hbm-oom" in out
        assert main(["verdicts", "promote", "restart-on-hbm-oom", "1",
                     "--database", database]) == 0
        assert main(["verdicts", "promote", "restart-on-hbm-oom", "1",
                     "--database", database]) == 1
        assert not demoted_step(db, "restart-on-hbm-oom", 0)
    finally:
        rig.stop()


def dt_ms(dt: object) -> int:
    from sentinel.incidents.convert import dt_to_ms
    return dt_to_ms(dt)  # type: ignore[arg-type]


# -- properties -----------------------------------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_OFFSET = st.one_of(st.none(), st.integers(0, 48 * H))


@given(ok=st.booleans(), recurred=_OFFSET, overridden=_OFFSET, now=st.integers(0, 72 * H),
       before=st.one_of(st.none(), st.floats(0, 1e4)), after=st.one_of(st.none(),
                                                                       st.floats(0, 1e4)))
def test_a_verdict_is_due_once_its_facts_decide_it(ok, recurred, overridden, now, before,
                                                   after) -> None:
    f = Facts(ok, T0, "VLLMEngineDead", None if recurred is None else T0 + recurred, 9,
              None if overridden is None else T0 + overridden, before, after)
    got = decide(f, T0 + now, CFG)
    inside = [t for t in (recurred, overridden) if t is not None and t <= CFG.after_ms]
    if not ok:
        assert got is not None and got[0] is Verdict.FAILED
    elif inside:  # the first thing that happened in the window decides, at once
        first = min(inside)
        assert got is not None
        assert got[0] is (Verdict.RECURRED if first == recurred and (
            overridden is None or overridden > CFG.after_ms or recurred <= overridden)
            else Verdict.OVERRIDDEN)
    elif now < CFG.after_ms:
        assert got is None  # never fixed before the window has passed
    else:
        assert got is not None and got[0] in (Verdict.FIXED, Verdict.FAILED)
        assert (got[0] is Verdict.FAILED) == bool(
            before and after is not None and after < CFG.throughput_ratio * before)


@given(st.lists(st.sampled_from(["fixed", "recurred", "failed", "overridden"]), max_size=12),
       st.integers(1, 8), st.integers(1, 8))
def test_demotion_is_a_majority_of_not_fixed_among_the_last_runs(recent, runs, bad) -> None:
    cfg = VerdictConfig.model_validate({"demote_runs": max(runs, bad), "demote_not_fixed": bad})
    window = recent[:cfg.demote_runs]
    expected = sum(v != "fixed" for v in window) >= cfg.demote_not_fixed
    assert (demotion(recent, cfg) is not None) is expected
