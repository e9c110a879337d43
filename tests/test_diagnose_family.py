"""The self-hosted model as the last classifier (issue 51).

For a death no signature named (the catch-all), the runbook request asks the
model for the failure family; the answer's `family` is validated against the
signatures' categories and the incident's runbook shows both verdicts. The
model endpoint is the simulator (its OpenAI API answers the requested schema).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from diagnose_helpers import T0, config, runbooks

from sentinel.incidents.log_events import record_log_events
from sentinel.incidents.runbook_text import runbook_lines
from sentinel.incidents.tracker import IncidentTracker
from sentinel.logs import CATEGORIES
from sentinel.model import Alert, AlertState, LogEvent, labels_of
from sentinel.respond.diagnose.budget import LEVELS
from sentinel.respond.diagnose.evidence import Evidence, Excerpt
from sentinel.respond.diagnose.prompt import build_messages
from sentinel.respond.diagnose.schema import InvalidRunbook, parse_runbook
from sentinel.respond.diagnose.worker import DiagnosisWorker
from sentinel.sim import SimServer, start_sim

UNKNOWN_DEATH = (
    "INFO 12-07 10:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 12.0 tokens/s",
    "[ 4018.441201] traps: VLLM::EngineCor[4242] trap invalid opcode ip:7f2a1c3d4e5f "
    "sp:7ffd2b3c4d50 error:0 in libggml-cpu.so[7f2a1c200000+95000]",
    "vllm.service: Main process exited, code=killed, status=4/ILL",
)
GOOD = {"summary": "s", "probable_cause": "c", "evidence": [], "steps": ["x"],
        "remediation": "none", "confidence": 0.5}


@pytest.fixture
def model() -> Iterator[SimServer]:
    server = start_sim(max_model_len=4096)
    yield server
    server.stop()


def _incident(db, signature: str, category: str) -> int:  # noqa: ANN001
    record_log_events(db, [LogEvent(
        target="gpu-a", source="journal:vllm.service", signature=signature, category=category,
        severity="critical", t_ms=T0 - 5000, line_no=None, excerpt=UNKNOWN_DEATH,
        runbook="A process ended on an error no crash signature knows.")], now_ms=T0)
    alert = Alert(group="vllm", rule="VLLMUnclassifiedCrash",
                  labels=labels_of({"alertname": "VLLMUnclassifiedCrash", "target": "gpu-a",
                                    "severity": "critical"}),
                  annotations=labels_of({"summary": "crash on gpu-a"}),
                  state=AlertState.FIRING, value=1.0, active_at_ms=T0, last_eval_ms=T0,
                  fired_at_ms=T0)
    (notification,) = IncidentTracker(db).process([alert], T0)
    return notification.incident_id


def test_the_family_is_validated_against_the_categories() -> None:
    assert parse_runbook(json.dumps({**GOOD, "family": "cuda_oom"})).family == "cuda_oom"
    assert parse_runbook(json.dumps(GOOD)).family is None  # an answer without it still stands
    with pytest.raises(InvalidRunbook, match="family"):
        parse_runbook(json.dumps({**GOOD, "family": "cosmic_rays"}))


def _evidence(signature: str) -> Evidence:
    return Evidence(1, "VLLMUnclassifiedCrash", "gpu-a", "2026-12-07T10:00:00Z", (), (),
                    (Excerpt(signature, "other", "journal:vllm.service", UNKNOWN_DEATH),),
                    (), (), "", signature)


def test_the_request_asks_for_the_family_when_no_signature_named_the_death() -> None:
    trim = LEVELS[0]
    asked = build_messages(_evidence("unclassified_crash"), trim)[-1]["content"]
    named = build_messages(_evidence("native_crash"), trim)[-1]["content"]
    assert "No crash signature names this failure" in asked
    assert "No crash signature names this failure" not in named


def test_the_incident_shows_the_signatures_verdict_and_the_models(incident_db, model) -> None:
    incident = _incident(incident_db, "unclassified_crash", "other")
    worker = DiagnosisWorker(incident_db, config([{"name": "m0", "url": model.url,
                                                   "timeout": "5s"}]))
    assert worker.tick(T0 + 1000) == [incident]
    (data,) = runbooks(incident_db, incident)
    assert data["validated"] is True
    family = data["runbook"]["family"]
    assert family in CATEGORIES
    assert data["signature_verdict"] == {"signature": "unclassified_crash", "category": "other"}
    assert f"Family: signature says other (unclassified_crash); model says {family}" \
        in runbook_lines(data)
    (body,) = model.chat_requests
    assert "family" in body["response_format"]["json_schema"]["schema"]["required"]
    assert "No crash signature names this failure" in body["messages"][-1]["content"]
