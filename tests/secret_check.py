"""A shared check that a receiver leaks none of its secrets (style habit 7).

Every receiver test that configures a secret (a token in the URL path or
query, an API key header) ends with `assert_no_secret_leak(...)` over what
the receiver produced: its DeliveryResults, any texts (exception strings,
repr()s) and the captured log records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import quote

import pytest


def secret_variants(secret: str) -> set[str]:
    """The secret as it may appear in text: verbatim and percent-encoded."""
    return {secret, quote(secret, safe=""), quote(secret, safe="/:")}


def assert_no_secret_leak(
    secrets: Iterable[str],
    *,
    results: Iterable[object] = (),
    texts: Iterable[str] = (),
    caplog: pytest.LogCaptureFixture | None = None,
    records: Iterable[logging.LogRecord] = (),
) -> None:
    """Fail if any secret occurs in the results (their `detail` and repr), texts or log records.

    The failure message names where the secret appeared, with the secret
    itself masked, so a failing CI log does not leak it either.
    """
    haystacks: list[tuple[str, str]] = []
    for r in results:
        haystacks.append(("result.detail", str(getattr(r, "detail", ""))))
        haystacks.append(("repr(result)", repr(r)))
    haystacks += [("text", str(t)) for t in texts]
    all_records = list(records) + (list(caplog.records) if caplog is not None else [])
    fmt = logging.Formatter("%(levelname)s %(name)s %(message)s")
    for rec in all_records:
        haystacks.append((f"log record {rec.name}", fmt.format(rec)))
    if caplog is not None:
        haystacks.append(("caplog.text", caplog.text))
    checked = [s for s in secrets if s]
    assert checked, "assert_no_secret_leak needs at least one non-empty secret"
    for secret in checked:
        for variant in secret_variants(secret):
            for where, text in haystacks:
                if variant in text:
                    masked = text.replace(variant, "***SECRET***")
                    pytest.fail(f"secret leaked in {where}: {masked[:300]!r}")


def database_texts(db: object) -> list[str]:
    """Every row of every table of a Sentinel database, as text, for `texts=`.

    Covers what the notify stage writes (outbox rows with their last error,
    timeline events, groups, intents), so a check over it shows that no
    secret reached the database by any path.
    """
    from sqlalchemy import MetaData, select

    engine = db.engine  # type: ignore[attr-defined]
    meta = MetaData()
    meta.reflect(engine)
    out: list[str] = []
    with engine.connect() as conn:
        for table in meta.sorted_tables:
            out += [f"{table.name}: {tuple(row)!r}" for row in conn.execute(select(table))]
    return out
