"""What a diagnosis is asked about: plain data gathered from the incident store and the series.

Everything in an `Evidence` has been redacted already (see `gather.py`); the
prompt builder and the budget only shorten it.
"""

from __future__ import annotations

from dataclasses import dataclass

Pairs = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Excerpt:
    """One crash excerpt from a log, as it lies on the incident's timeline."""

    signature: str
    category: str
    source: str
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SeriesValues:
    """Recent values of one series: (seconds relative to the incident's onset, value)."""

    name: str
    points: tuple[tuple[int, float], ...]


@dataclass(frozen=True, slots=True)
class Evidence:
    """The incident as the model sees it."""

    incident_id: int
    alertname: str
    target: str
    opened_at: str  # ISO-8601 UTC
    labels: Pairs
    values: Pairs  # alert fingerprint → value, as text
    excerpts: tuple[Excerpt, ...]
    series: tuple[SeriesValues, ...]
    target_config: Pairs
    static_runbook: str
    signature: str  # of the excerpt the static runbook belongs to; "" when none
    # A fleet incident's headline (`VLLMKVCacheHigh on 4,812 of 5,000 targets`): the rest
    # is one member's evidence, standing for every member. "" for a target's incident.
    fleet: str = ""
