"""`sentinel silence add/list/expire` through the real CLI, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import select

from sentinel.api.auth import Principal
from sentinel.api.service import ApiService
from sentinel.cli import main
from sentinel.incidents.db import Database
from sentinel.incidents.models_api import ApiAudit


def test_add_list_expire(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    Database(db_url).upgrade()  # the CLI only reads and writes; `db upgrade` creates
    base = ["--database", db_url]
    assert main(["silence", "add", *base, 'target="gemma-26b"', "alertname=~KV.*", "-d", "2h",
                 "-a", "alice", "-C", "node maintenance"]) == 0
    sid = capsys.readouterr().out.strip()
    assert str(uuid.UUID(sid)) == sid  # the API's id, not a row number
    assert main(["silence", "list", *base, "--json"]) == 0
    [item] = json.loads(capsys.readouterr().out)
    assert item["id"] == sid and item["state"] == "active"
    assert item["matchers"] == ['target="gemma-26b"', 'alertname=~"KV.*"']
    assert (item["created_by"], item["comment"]) == ("alice", "node maintenance")
    assert main(["silence", "expire", *base, str(sid)]) == 0
    assert main(["silence", "list", *base, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1]) == []
    assert main(["silence", "list", *base, "--all"]) == 0
    assert "expired" in capsys.readouterr().out
    assert main(["silence", "expire", *base, str(sid)]) == 1
    assert "already expired" in capsys.readouterr().err
    Database(db_url).dispose()


def test_bad_matcher_is_a_clear_error(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    Database(db_url).upgrade()
    assert main(["silence", "add", "--database", db_url, "target~x", "-C", "c"]) == 1
    assert "not a matcher" in capsys.readouterr().err
    assert main(["silence", "add", "--database", db_url, "a=~(", "-C", "c"]) == 1
    assert "invalid regex" in capsys.readouterr().err


def test_cli_and_api_silences_are_the_same_objects(db_url: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 53: one id, one set of checks, one audit, whichever side made or ends it."""
    db = Database(db_url)
    db.upgrade()
    base = ["--database", db_url]
    assert main(["silence", "add", *base, "target=a", "-a", "alice", "-C", "from the cli"]) == 0
    cli_id = capsys.readouterr().out.strip()
    service = ApiService(db)
    [seen] = [s for s in service.silences() if s["comment"] == "from the cli"]
    assert seen["id"] == cli_id and seen["createdBy"] == "alice"
    assert service.silence(cli_id)["status"]["state"] == "active"
    api_id = service.create_silence(
        {"matchers": [{"name": "target", "value": "b", "isRegex": False, "isEqual": True}],
         "startsAt": "2020-01-01T00:00:00Z", "endsAt": "2999-01-01T00:00:00Z",
         "comment": "from the api"}, Principal("lead", "write", "bearer"), "api")["silenceID"]
    assert main(["silence", "list", *base]) == 0
    listed = capsys.readouterr().out
    assert cli_id in listed and api_id in listed
    assert main(["silence", "expire", *base, api_id]) == 0  # the CLI ends the API's
    service.expire_silence(cli_id, Principal("lead", "write", "bearer"), "api")  # and back
    assert {s["status"]["state"] for s in service.silences()} == {"expired"}
    with db.session() as s:
        audited = [(a.via, a.action.split()[0]) for a in s.scalars(select(ApiAudit))]
    assert ("cli", "create") in audited and ("cli", "expire") in audited
    db.dispose()
