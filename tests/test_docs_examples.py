"""deploy/examples/*.yaml pass `sentinel check config --strict`, and the docs quote them whole."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "deploy" / "examples"
# What the examples read from the environment (secrets are never in the files).
ENV = {
    "ONCALL_WEBHOOK_URL": "http://127.0.0.1:9/oncall",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.example/services/T0/B0/abcdefabcdef",
    "PAGERDUTY_ROUTING_KEY": "R0UT1NGKEY0123456789abcdefabcdef",
    "SENTINEL_READ_TOKEN": "read-token-7f3a9c2e5b1d8f4a",
    "SENTINEL_WRITE_TOKEN": "write-token-2c8e6a4f1b9d7e3c",
}
NAMES = ["minimal.yaml", "gpu-fleet.yaml", "tpu-v6e.yaml", "kubernetes.yaml"]


def test_the_four_examples_exist() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_example_passes_check_config_strict(name: str, tmp_path: Path) -> None:
    config = tmp_path / name
    shutil.copy(EXAMPLES / name, config)
    env = {**os.environ, **ENV, "SENTINEL_DATABASE_URL": f"sqlite:///{tmp_path / 's.db'}"}
    done = subprocess.run(["sentinel", "check", "config", "--strict", name], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "SUCCESS" in done.stdout
    # No rule_files key in an example: the bundled rules load, and check config says so.
    if "rule_files" not in config.read_text():
        assert "loading the bundled rules" in done.stdout + done.stderr
    for secret in ENV.values():
        assert secret not in done.stdout + done.stderr


def test_minimal_is_minimal() -> None:
    text = (EXAMPLES / "minimal.yaml").read_text()
    keys = [line for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    assert len(keys) <= 10
    assert not any(k.startswith("rule_files") for k in keys)


def test_the_tpu_tutorial_includes_its_example() -> None:
    page = (ROOT / "docs" / "tutorials" / "tpu-v6e.md").read_text()
    assert '--8<-- "deploy/examples/tpu-v6e.yaml"' in page
