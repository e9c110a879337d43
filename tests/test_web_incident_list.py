"""The incident list shows an open incident once (issue 53): under "Open now", not again
under "History" with a duration of "–"."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from test_api_security import _config, plant

from sentinel.config import load_config
from sentinel.daemon.app import App

pytestmark = pytest.mark.integration


def test_an_open_incident_is_listed_once(tmp_path: Path) -> None:
    app = App(load_config(_config(tmp_path)))
    app.start()
    try:
        host, port = app.status.address  # type: ignore[union-attr]
        url = f"http://{host}:{port}"
        iid, _ = plant(app.pipeline.tracker.db, "plain")  # type: ignore[union-attr]
        page = httpx.get(f"{url}/").text
        open_now, history = page.split("<h2>History", 1)
        row = f'<a href="/incidents/{iid}">#{iid}</a>'
        assert open_now.count(row) == 1 and row not in history
        assert "<td class=duration>open</td>" in open_now
        # The live update of History reads the same filter (it would bring the row back).
        source = history.split('data-source="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
        assert "status=resolved" in source
        assert row not in httpx.get(f"{url}{source}").text
        # "Open now" updates itself too (it is where a new incident appears).
        assert 'id="incident-rows" data-source="/fragments/incidents?status=open' in open_now
        # Asked for by status, the list shows what was asked.
        assert row in httpx.get(f"{url}/?status=open").text.split("<h2>History", 1)[1]
    finally:
        app.stop(2)
