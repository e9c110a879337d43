"""`sentinel silence add/list/expire` through the real CLI, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest

from sentinel.cli import main
from sentinel.incidents.db import Database


def test_add_list_expire(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    Database(db_url).upgrade()  # the CLI only reads and writes; `db upgrade` creates
    base = ["--database", db_url]
    assert main(["silence", "add", *base, 'target="gemma-26b"', "alertname=~KV.*", "-d", "2h",
                 "-a", "alice", "-C", "node maintenance"]) == 0
    sid = int(capsys.readouterr().out.strip())
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
