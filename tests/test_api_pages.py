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
