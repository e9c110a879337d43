"""Acting from the page in the default setup (issue 53): no tokens → the page says how to
get one; tokens are added and rotated by a reload, no restart; sessions follow them.

A real daemon (App) on loopback, the real login form and API, the real reload path.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from sentinel.config import load_config
from sentinel.daemon.app import App
from sentinel.daemon.reload import restart_needed

pytestmark = pytest.mark.integration

OLD = "old-write-token-0123456789abcdef"
NEW = "new-write-token-fedcba9876543210"


def _write(cfg: Path, db: Path, token: str | None) -> None:
    text = f"database: sqlite:///{db}\nlisten: 127.0.0.1:0\nrule_files: []\n"
    if token is not None:
        text += f"api:\n  tokens:\n    - {{name: lead, role: write, token: {token}}}\n"
    cfg.write_text(text)


def _login(url: str, token: str) -> httpx.Response:
    return httpx.post(f"{url}/login", data={"token": token}, follow_redirects=False)


def test_no_tokens_then_added_then_rotated_by_reload(tmp_path: Path) -> None:
    cfg, db = tmp_path / "sentinel.yaml", tmp_path / "s.db"
    _write(cfg, db, None)
    app = App(load_config(cfg), loader=lambda: load_config(cfg), source=str(cfg))
    app.start()
    try:
        host, port = app.status.address  # type: ignore[union-attr]
        url = f"http://{host}:{port}"
        # The default setup: the page says what to do instead of "unknown token".
        page = httpx.get(f"{url}/login").text
        assert "No API tokens are configured" in page and "api:" in page and "reload" in page
        refused = _login(url, "anything-at-all-0123456789")
        assert refused.status_code == 401
        assert "no tokens are configured" in refused.text and "unknown token" not in refused.text
        api = httpx.post(f"{url}/api/v2/silences", headers={"Authorization": f"Bearer {OLD}"},
                         json={})
        assert api.status_code == 401 and "no API tokens are configured" in api.text

        _write(cfg, db, OLD)  # add a token: a reload, not a restart
        assert app.reload()
        assert "No API tokens" not in httpx.get(f"{url}/login").text
        logged = _login(url, OLD)
        assert logged.status_code == 303
        cookie = logged.cookies.get("sentinel_session")
        assert cookie and "lead" in httpx.get(f"{url}/", cookies={"sentinel_session": cookie}
                                              ).text

        _write(cfg, db, NEW)  # rotate it
        assert app.reload()
        assert _login(url, OLD).status_code == 401
        assert _login(url, NEW).status_code == 303
        # The old token's session ended with it... unless the name and role stayed: a
        # rotation keeps the person logged in (the session names the token, not its value).
        assert "lead" in httpx.get(f"{url}/", cookies={"sentinel_session": cookie}).text

        _write(cfg, db, None)  # removing every token ends every session
        assert app.reload()
        assert "lead" not in httpx.get(f"{url}/", cookies={"sentinel_session": cookie}).text
    finally:
        app.stop(2)


def test_tokens_reload_in_place_but_allowed_hosts_need_a_restart(tmp_path: Path) -> None:
    cfg, db = tmp_path / "a.yaml", tmp_path / "s.db"
    _write(cfg, db, None)
    before = load_config(cfg)
    _write(cfg, db, OLD)
    assert restart_needed(before, load_config(cfg)) == []
    cfg.write_text(cfg.read_text() + "  allowed_hosts: [sentinel.example.com]\n")
    assert restart_needed(before, load_config(cfg)) == [
        "api.allowed_hosts: changed; a restart is needed to apply it"]


def test_a_reload_that_removes_the_tokens_off_loopback_is_refused(tmp_path: Path) -> None:
    cfg, db = tmp_path / "sentinel.yaml", tmp_path / "s.db"
    cfg.write_text(f"database: sqlite:///{db}\nlisten: 0.0.0.0:0\nrule_files: []\n"
                   f"api:\n  tokens:\n    - {{name: lead, role: write, token: {OLD}}}\n")
    running = load_config(cfg)
    cfg.write_text(f"database: sqlite:///{db}\nlisten: 0.0.0.0:0\nrule_files: []\n")
    from sentinel.daemon.reload import ReloadRefused, validate

    with pytest.raises(ReloadRefused, match="api.tokens is empty"):
        validate(load_config(cfg), str(cfg))
    assert running.api.tokens
