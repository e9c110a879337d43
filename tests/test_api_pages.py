"""Keyset pagination over 10,000 incidents through a real daemon: no duplicate, no gap, even
with ties on opened_at and incidents opened while walking; the OpenAPI document matches the
routes served."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import insert

from sentinel.api.history import FILTERS
from sentinel.api.openapi import openapi_document
from sentinel.api.stats import PARAMS as STATS_PARAMS
from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.incidents.models import Incident

pytestmark = pytest.mark.integration
N = 10_000


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[App, str]]:
    cfg = tmp_path / "sentinel.yaml"
    cfg.write_text(f"database: sqlite:///{tmp_path / 's.db'}\nlisten: 127.0.0.1:0\n")
    app = App(load_config(cfg))
    app.start()
    host, port = app.status.address  # type: ignore[union-attr]
    yield app, f"http://{host}:{port}"
    app.stop(2)


def _rows(start: int, n: int, base: datetime) -> list[dict]:
    # Three incidents share each opened_at: the id must break the tie.
    return [{"id": i, "group_key": f"A/t{i}", "alertname": f"Alert{i % 7}",
             "target": f"t{i % 13}", "status": "resolved", "severity": "warning",
             "summary": "", "labels": {}, "opened_at": base + timedelta(seconds=i // 3),
             "resolved_at": base + timedelta(seconds=i // 3 + 60),
             "updated_at": base, "category": f"c{i % 3}", "detect_ms": 1000,
             "resolve_ms": 60_000}
            for i in range(start, start + n)]


def test_walk_10000_incidents_without_duplicate_or_gap(daemon: tuple[App, str]) -> None:
    app, url = daemon
    db = app.pipeline.tracker.db  # type: ignore[union-attr]
    base = datetime(2026, 11, 1, tzinfo=UTC)
    with db.session() as s:
        s.execute(insert(Incident), _rows(1, N, base))
    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        params = {"limit": "487"} | ({"cursor": cursor} if cursor else {})
        body = httpx.get(f"{url}/api/v1/incidents", params=params).json()
        seen += [i["id"] for i in body["incidents"]]
        pages += 1
        if pages == 3:  # newer incidents arrive mid-walk: they must not shift the pages
            with db.session() as s:
                s.execute(insert(Incident), _rows(N + 1, 50, base + timedelta(days=1)))
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == N
    assert sorted(seen) == list(range(1, N + 1))
    assert seen == sorted(seen, key=lambda i: (i // 3, i), reverse=True)  # newest first
    # A filtered walk is complete too.
    seen_t = []
    cursor = None
    while True:
        params = {"limit": "100", "target": "t5"} | ({"cursor": cursor} if cursor else {})
        body = httpx.get(f"{url}/api/v1/incidents", params=params).json()
        seen_t += [i["id"] for i in body["incidents"]]
        if not (cursor := body["next_cursor"]):
            break
    assert sorted(seen_t) == [i for i in range(1, N + 51) if i % 13 == 5]


def test_openapi_document_matches_the_routes(daemon: tuple[App, str]) -> None:
    app, url = daemon
    doc = httpx.get(f"{url}/api/v1/openapi.json").json()
    assert doc == openapi_document()
    served: dict[str, set[str]] = {}
    from starlette.routing import Route

    from sentinel.api.routes import api_routes
    from sentinel.api.service import ApiService

    for route in api_routes(ApiService(app.pipeline.tracker.db), None):  # type: ignore[arg-type,union-attr]
        assert isinstance(route, Route)
        served.setdefault(route.path, set()).update(
            m.lower() for m in (route.methods or ()) if m != "HEAD")
    documented = {path: set(ops) for path, ops in doc["paths"].items()}
    assert served == documented
    params = {p["name"] for p in doc["paths"]["/api/v1/incidents"]["get"]["parameters"]}
    assert params == set(FILTERS)
    params = {p["name"] for p in doc["paths"]["/api/v1/stats"]["get"]["parameters"]}
    assert params == set(STATS_PARAMS)
    # Every documented GET without a path parameter answers 200 (not 404/405).
    for path, ops in doc["paths"].items():
        if "get" in ops and "{" not in path:
            r = httpx.get(url + path, params={"query": "1"} if path.endswith("query") else {})
            assert r.status_code == 200, path


def test_stats_and_durations_for_incidents_resolved_without_remediation(
        daemon: tuple[App, str]) -> None:
    """MTTR over all resolved incidents is a figure even when none was remediated (it read
    "–"); the list and the incident show durations; the charts have axes."""
    import re

    app, url = daemon
    db = app.pipeline.tracker.db  # type: ignore[union-attr]
    now = datetime.now(tz=UTC)
    rows = _rows(1, 4, now - timedelta(hours=2))
    for r, minutes in zip(rows, (1, 2, 3, 10), strict=True):
        r["resolved_at"] = r["opened_at"] + timedelta(minutes=minutes)
        r["resolve_ms"] = minutes * 60_000
        r["alertname"] = "Flappy"
    with db.session() as s:
        s.execute(insert(Incident), rows)
    total = httpx.get(f"{url}/api/v1/stats").json()["total"]["time_to_resolve_ms"]
    assert total == {"n": 4, "mean": 240_000.0, "p50": 120_000.0, "p90": 600_000.0}
    html = httpx.get(f"{url}/stats").text
    row = re.search(r"<tr[^>]*><td>Flappy</td>.*?</tr>", html)
    assert row, html
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0))
    # alert, count, resolved, detect, MTTR all, p50, p90, MTTR remediated, p50, p90
    assert cells[4:7] == ["4.0m", "2.0m", "10.0m"], cells
    assert cells[7] == "–"  # none remediated
    assert html.count('class="axis"') >= 4 and "axis-label" in html  # both charts, x axis
    listing = httpx.get(f"{url}/").text
    assert '<td class=duration>10.0m</td>' in listing and '<td class=duration>2.0m</td>' in listing
    page = httpx.get(f"{url}/incidents/4").text
    assert '<dd id=duration>10.0m</dd>' in page and '<dd id=ttd>1.0s</dd>' in page
