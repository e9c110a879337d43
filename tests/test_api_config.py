"""The `api:` section and `approval:` of a policy: valid settings load, mistakes name the key,
token files are read, tokens come from ${ENV}."""

from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.config import ConfigError, load_config

POLICY = """\
targets: [{name: a, url: "http://127.0.0.1:8000"}]
remediation:
  policies:
    - name: p
      alerts: [X]
      approval: APPROVAL
      steps: [{docker_restart: {container: vllm}}]
"""


def _load(tmp_path: Path, text: str, env: dict[str, str] | None = None):  # noqa: ANN202
    path = tmp_path / "sentinel.yaml"
    path.write_text(text)
    return load_config(path, environ=env) if env is not None else load_config(path)


def test_approval_settings(tmp_path: Path) -> None:
    c = _load(tmp_path, POLICY.replace("APPROVAL", "required"))
    (p,) = c.remediation.policies
    assert p.approval == "required" and p.approval_expiry_ms == 900_000
    with pytest.raises(ConfigError, match="approval: must be none or required"):
        _load(tmp_path, POLICY.replace("APPROVAL", "maybe"))


def test_tokens_from_env_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "read.token").write_text("r" * 20 + "\n")
    monkeypatch.setenv("SENTINEL_WRITE_TOKEN", "w" * 24)
    c = _load(tmp_path, "api:\n  tokens:\n"
              "    - {name: lead, role: write, token: '${SENTINEL_WRITE_TOKEN}'}\n"
              "    - {name: graf, role: read, token_file: read.token}\n")
    assert [(t.name, t.role, t.token) for t in c.api.tokens] == [
        ("lead", "write", "w" * 24), ("graf", "read", "r" * 20)]
    assert "w" * 24 in c.secrets() and "r" * 20 in c.secrets()
    assert "w" * 24 not in repr(c.api)


@pytest.mark.parametrize(("tokens", "message"), [
    ("- {name: a, token: short}", "at least 16 characters"),
    ("- {name: a, role: admin, token: aaaaaaaaaaaaaaaaaa}", "must be read or write"),
    ("- {name: a}", "token or token_file is required"),
    ("- {name: a, token: aaaaaaaaaaaaaaaaaa}\n    - {name: a, token: bbbbbbbbbbbbbbbbbb}",
     "duplicate token name"),
])
def test_token_mistakes(tmp_path: Path, tokens: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, f"api:\n  tokens:\n    {tokens}\n")
