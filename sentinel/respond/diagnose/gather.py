"""Evidence for a diagnosis, read from the incident store and the series store, redacted.

Every string that may come from outside (log lines, labels, configuration)
goes through the PromptRedactor here, before anything else sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from sentinel.config.model import TargetConfig
from sentinel.incidents.convert import dt_to_ms, format_value, iso, value_from_db
from sentinel.incidents.db import Database
from sentinel.incidents.models import Incident, IncidentAlert, TimelineEvent, TimelineKind
from sentinel.model import METRIC_NAME
from sentinel.respond.diagnose.evidence import Evidence, Excerpt, Pairs, SeriesValues
from sentinel.secretpatterns import PromptRedactor
from sentinel.secrets import safe_url
from sentinel.store import MemoryStore
from sentinel.store.memory import Matcher

SeriesReader = Callable[[str, int], tuple[SeriesValues, ...]]

# What tells an OOM or an overload apart: KV cache, queue, preemptions, liveness.
SERIES_NAMES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                "vllm:num_requests_waiting", "vllm:num_preemptions_total", "up")
SERIES_BEFORE_MS = 5 * 60_000
SERIES_AFTER_MS = 60_000
SERIES_POINTS = 12


def gather(db: Database, incident_id: int, redactor: PromptRedactor,
           series: SeriesReader | None = None) -> Evidence | None:
    """The evidence of one incident, or None when there is no such incident.

    `target_config` is left empty: the caller knows the config (`target_pairs`).
    """
    with db.session() as s:
        incident = s.get(Incident, incident_id)
        if incident is None:
            return None
        alerts = s.scalars(select(IncidentAlert).where(
            IncidentAlert.incident_id == incident_id)).all()
        events = s.scalars(select(TimelineEvent).where(
            TimelineEvent.incident_id == incident_id,
            TimelineEvent.kind == TimelineKind.LOG_EXCERPT,
        ).order_by(TimelineEvent.at, TimelineEvent.id)).all()
    r = redactor.redact
    excerpts = tuple(_excerpt(e.data or {}, redactor) for e in events)
    static = next((e.data for e in reversed(events) if (e.data or {}).get("runbook")), None)
    onset = min([incident.opened_at, *(e.at for e in events)])
    return Evidence(
        incident_id=incident.id, alertname=r(incident.alertname), target=r(incident.target),
        opened_at=iso(incident.opened_at) or "", labels=_pairs(incident.labels, redactor),
        values=tuple((a.fingerprint, format_value(value_from_db(a.value))) for a in alerts),
        excerpts=excerpts,
        series=series(incident.target, dt_to_ms(onset)) if series is not None else (),
        target_config=(),
        static_runbook=r(str(static["runbook"])) if static else "",
        signature=str(static.get("signature", "")) if static else "",
    )


def _excerpt(data: dict[str, Any], redactor: PromptRedactor) -> Excerpt:
    return Excerpt(signature=str(data.get("signature", "")),
                   category=str(data.get("category", "")),
                   source=redactor.redact(str(data.get("source", ""))),
                   lines=redactor.lines(str(x) for x in data.get("excerpt") or ()))


def _pairs(mapping: Any, redactor: PromptRedactor) -> Pairs:
    items = mapping.items() if isinstance(mapping, dict) else mapping or ()
    return tuple((str(k), redactor.redact(str(v))) for k, v in sorted(items))


def target_pairs(target: TargetConfig, redactor: PromptRedactor) -> Pairs:
    """What the config knows about a target, as name/value pairs (URLs reduced to host:port)."""
    out = [("url", safe_url(target.url)), ("scrape_interval", f"{target.scrape_interval_ms}ms")]
    out += [(f"label {k}", v) for k, v in sorted(target.labels.items())]
    if target.xla_cache_path:
        out.append(("xla_cache_path", target.xla_cache_path))
    if target.tpu is not None:
        out.append(("tpu", f"{target.tpu.zone}/{target.tpu.node}"))
    logs = [*target.logs.files, *(f"docker:{d}" for d in target.logs.docker),
            *(f"journal:{j}" for j in target.logs.journal)]
    if target.logs.cloud_logging is not None:
        logs.append("cloud-logging")
    if logs:
        out.append(("logs", ", ".join(logs)))
    return tuple((k, redactor.redact(v)) for k, v in out)


def store_series(store: MemoryStore) -> SeriesReader:
    """A SeriesReader over the embedded store: a few points per series around the onset."""
    def read(target: str, onset_ms: int) -> tuple[SeriesValues, ...]:
        out = []
        for name in SERIES_NAMES:
            matchers = [Matcher(METRIC_NAME, "=", name), Matcher("target", "=", target)]
            merged: dict[int, float] = {}
            for series in store.select(matchers, onset_ms - SERIES_BEFORE_MS,
                                       onset_ms + SERIES_AFTER_MS):
                for t, v in zip(series.ts, series.vs, strict=True):
                    merged[t] = max(v, merged.get(t, v))  # engines: the worst one
            if merged:
                times = sorted(merged)
                step = max(1, len(times) // SERIES_POINTS)
                picked = times[::step][-SERIES_POINTS:]
                out.append(SeriesValues(name, tuple(
                    ((t - onset_ms) // 1000, merged[t]) for t in picked)))
        return tuple(out)
    return read

