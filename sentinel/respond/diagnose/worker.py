"""The scheduled diagnosis job: open incidents with crash evidence get a runbook.

Each tick looks at open incidents that have a log excerpt and no model
runbook. It asks the Diagnoser; when no endpoint answers, the signature's
static runbook is stored at once and the model is asked again with backoff,
until the incident resolves or `deadline` after it opened, when a NOTE says
the diagnosis gave up. A model runbook that arrives later is added to the
timeline as its own event.

A fleet-wide failure is one request: the fleet incident is asked about with one
member's evidence, and the runbook is stored on it; its quiet members are not asked
about (records.pending) and show the fleet's runbook.

Nothing here acts on a reply: a proposed remediation is recorded as data.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from sentinel.backoff import exponential
from sentinel.config import Config
from sentinel.incidents.convert import dt_to_ms, ms_to_dt
from sentinel.incidents.db import Database
from sentinel.incidents.models import TimelineKind
from sentinel.incidents.operator import claim_diagnosis_requests
from sentinel.respond.diagnose import records
from sentinel.respond.diagnose.evidence import Evidence
from sentinel.respond.diagnose.gather import SeriesReader, gather, target_pairs
from sentinel.respond.diagnose.service import Diagnoser, ModelAnswer, NoAnswer
from sentinel.secretpatterns import PromptRedactor

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Backoff:
    next_ms: int
    delay_ms: int
    failures: int


class DiagnosisWorker:
    """Finds incidents that need a runbook and stores what the model (or the signature) says."""

    def __init__(self, db: Database, config: Config, series: SeriesReader | None = None,
                 diagnoser: Diagnoser | None = None) -> None:
        assert config.diagnosis is not None, "diagnosis is not configured"
        self.db = db
        self.config = config
        self.settings = config.diagnosis
        self.series = series
        self.diagnoser = diagnoser or Diagnoser(self.settings, config.targets)
        self.redactor = PromptRedactor(config.secrets())
        self._backoff: dict[int, _Backoff] = {}

    def close(self) -> None:
        """Close the endpoints' connections."""
        self.diagnoser.close()

    def tick(self, now_ms: int) -> list[int]:
        """One pass over pending incidents; the ids that got a model runbook."""
        done = self._requested(now_ms)
        for p in records.pending(self.db):
            if now_ms - dt_to_ms(p.opened_at) > self.settings.deadline_ms:
                self._give_up(p.incident_id, now_ms, p.has_static, ())
                continue
            backoff = self._backoff.get(p.incident_id)
            if backoff is not None and now_ms < backoff.next_ms:
                continue
            try:
                if self.diagnose(p.incident_id, now_ms, has_static=p.has_static):
                    done.append(p.incident_id)
            except Exception:  # one incident never stops the others
                log.exception("diagnosis of incident %d failed", p.incident_id)
        open_ids = {p.incident_id for p in records.pending(self.db)}
        self._backoff = {k: v for k, v in self._backoff.items() if k in open_ids}
        # Asked for while this tick ran: the wake-up that came with it found the job
        # running and was dropped, so it is served here rather than an interval later.
        return done + self._requested(now_ms)

    def _requested(self, now_ms: int) -> list[int]:
        """Diagnoses people asked for (page, API): each claimed once, run whatever the
        incident's state or earlier runbooks, as `sentinel diagnose` does."""
        done = []
        for incident_id in claim_diagnosis_requests(self.db):
            try:
                if self.diagnose(incident_id, now_ms, has_static=True, retry=False):
                    done.append(incident_id)
            except Exception:  # one incident never stops the others
                log.exception("requested diagnosis of incident %d failed", incident_id)
        return done

    def diagnose(self, incident_id: int, now_ms: int, *, has_static: bool = False,
                 retry: bool = True) -> bool:
        """Diagnose one incident now; True when a model runbook was stored."""
        # A fleet incident is asked about once, with one member's evidence (records.py).
        fleet = records.fleet_evidence(self.db, incident_id)
        ev = gather(self.db, incident_id if fleet is None else fleet[0], self.redactor,
                    self.series)
        if ev is None:
            raise ValueError(f"no incident {incident_id}")
        if fleet is not None:
            ev = dataclasses.replace(ev, incident_id=incident_id,
                                     fleet=self.redactor.redact(fleet[1]))
        target = next((t for t in self.config.targets if t.name == ev.target), None)
        if target is not None:
            ev = dataclasses.replace(ev, target_config=target_pairs(target, self.redactor))
        answer = self.diagnoser.diagnose(ev)
        if isinstance(answer, ModelAnswer):
            self._store_model(incident_id, now_ms, answer, ev)
            self._backoff.pop(incident_id, None)
            return True
        if not has_static and ev.static_runbook:
            self._store_static(incident_id, now_ms, ev.static_runbook, ev.signature, answer)
        if not retry:  # by hand: say why, and leave the daemon's retries alone
            records.add_event(self.db, incident_id, ms_to_dt(now_ms), TimelineKind.NOTE,
                              "model diagnosis failed: " + "; ".join(
                                  f"{e}: {m}" for e, m in self._errors(answer.errors))[:500],
                              {"diagnosis": "failed", "errors": self._errors(answer.errors)})
        elif answer.retryable:
            self._schedule_retry(incident_id, now_ms)
        else:
            self._give_up(incident_id, now_ms, True, answer.errors)
        return False

    def _schedule_retry(self, incident_id: int, now_ms: int) -> None:
        prev = self._backoff.get(incident_id)
        failures = 1 if prev is None else prev.failures + 1
        delay = exponential(failures, self.settings.retry_ms, self.settings.retry_max_ms)
        self._backoff[incident_id] = _Backoff(now_ms + delay, delay, failures)

    def _store_model(self, incident_id: int, now_ms: int, a: ModelAnswer,
                     ev: Evidence) -> None:
        chat, validated = a.chat, a.runbook is not None
        data = {
            "source": "model", "endpoint": a.endpoint, "model": a.model,
            "latency_ms": chat.latency_ms, "prompt_tokens": chat.prompt_tokens,
            "completion_tokens": chat.completion_tokens, "finish_reason": chat.finish_reason,
            "validated": validated, "attempts": a.attempts,
            "prompt_tokens_counted": a.fitted.prompt_tokens, "counted_by": a.fitted.counted_by,
            "max_tokens": a.fitted.max_tokens, "trim_level": a.fitted.level,
            "structured_output": chat.dialect, "usage_from": chat.usage_from,
            # The prompt was built from redacted evidence; redact again in case a
            # config secret reached it some other way.
            "prompt": self.redactor.redact(a.fitted.messages[-1]["content"]),
        }
        if ev.excerpts:  # the signatures' verdict, shown beside the model's family
            last = ev.excerpts[-1]
            data["signature_verdict"] = {"signature": last.signature,
                                         "category": last.category}
        if chat.refusals:  # what the server said of the forms it does not take
            data["refused_forms"] = [{"form": f, "said": self.redactor.redact(m)}
                                     for f, m in chat.refusals]
        if a.runbook is not None:
            data["runbook"] = a.runbook.to_json()
            data["proposed_action"] = a.runbook.remediation
            what = a.runbook.summary
        else:
            data["raw"] = self.redactor.redact(a.raw)
            data["invalid_reason"] = a.invalid_reason
            data["proposed_action"] = None
            what = f"unvalidated answer ({a.invalid_reason})"
        if chat.truncated:
            data["reply_truncated"] = True
            data["reply_cap_bytes"] = self.settings.max_reply_bytes
            what += f" (reply cut at {self.settings.max_reply_bytes} bytes, the rest discarded)"
        message = (f"runbook from {a.model} via {a.endpoint} ({chat.latency_ms} ms, "
                   f"{chat.prompt_tokens}+{chat.completion_tokens} tokens): {what}")
        records.add_event(self.db, incident_id, ms_to_dt(now_ms), TimelineKind.RUNBOOK,
                          message[:1000], data)
        log.info("incident %d: model runbook stored (%s, validated=%s)", incident_id,
                 a.endpoint, validated)

    def _store_static(self, incident_id: int, now_ms: int, text: str, signature: str,
                      answer: NoAnswer) -> None:
        data = {"source": "static", "signature": signature, "text": text, "validated": True,
                "model_errors": self._errors(answer.errors),
                "skipped_endpoints": list(answer.skipped)}
        records.add_event(self.db, incident_id, ms_to_dt(now_ms), TimelineKind.RUNBOOK,
                          f"static runbook of {signature} (no model endpoint answered)", data)
        log.warning("incident %d: no model endpoint answered; static runbook stored",
                    incident_id)

    def _give_up(self, incident_id: int, now_ms: int, has_static: bool,
                 errors: tuple[tuple[str, str], ...]) -> None:
        records.add_event(self.db, incident_id, ms_to_dt(now_ms), TimelineKind.NOTE,
                          "model diagnosis gave up: " + ("; ".join(
                              f"{e}: {m}" for e, m in self._errors(errors))
                              or "deadline passed")[:500],
                          {"diagnosis": records.GAVE_UP, "errors": self._errors(errors),
                           "static_runbook": has_static})
        self._backoff.pop(incident_id, None)

    def _errors(self, errors: tuple[tuple[str, str], ...]) -> list[list[str]]:
        return [[e, self.redactor.redact(m)] for e, m in errors]
