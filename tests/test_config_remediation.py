"""The `remediation:` section: a valid policy loads; mistakes are named by file, line and key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from sentinel.config import ConfigError, load_config

BASE = """\
targets:
  - name: tpu-a
    url: http://127.0.0.1:8000
    xla_cache_path: /dev/shm/xla
remediation:
  command_allowlist: [/usr/local/bin/vllm-ctl]
  policies:
"""


def load(tmp_path: Path, policies: str):  # noqa: ANN201
    path = tmp_path / "sentinel.yaml"
    path.write_text(BASE + textwrap.indent(textwrap.dedent(policies), "    "))
    return load_config(path)


def problems(tmp_path: Path, policies: str) -> str:
    with pytest.raises(ConfigError) as exc:
        load(tmp_path, policies)
    return str(exc.value)


def test_a_full_policy_loads(tmp_path: Path) -> None:
    c = load(tmp_path, """\
        - name: restart
          alerts: [VLLMHBMOutOfMemory, VLLMTargetDown]
          match: {severity: critical}
          targets: [tpu-a]
          cooldown: 10m
          allow_cold: true
          steps:
            - docker_restart: {container: "vllm-{target}", settle: 1s}
              verify_deadline: 90s
              attempts: 2
            - command: {argv: [/usr/local/bin/vllm-ctl, restart, "{target}"]}
        """)
    p = c.remediation.policies[0]
    assert (p.cooldown_ms, p.steps[0].kind, p.steps[0].attempts) == (600_000, "docker_restart", 2)
    assert p.steps[0].params.settle_ms == 1000 and p.steps[0].verify_deadline_ms == 90_000
    assert p.applies_to("VLLMTargetDown", {"severity": "critical"}, "tpu-a")
    assert not p.applies_to("VLLMTargetDown", {"severity": "warning"}, "tpu-a")
    assert not p.applies_to("VLLMRequestsQueued", {"severity": "critical"}, "tpu-a")


@pytest.mark.parametrize(("policies", "where", "message"), [
    ("""\
        - name: p
          alerts: [X]
          steps: [{docker_restart: {container: v}, command: {argv: [/bin/true]}}]
        """, "remediation.policies[0].steps[0]", "exactly one action"),
    ("""\
        - name: p
          alerts: [X]
          steps: [{command: {argv: [/bin/rm, -rf, /]}}]
        """, "command.argv", "not in remediation.command_allowlist"),
    ("""\
        - name: p
          alerts: [X]
          allow_cold: true
          steps: [{tpu_node_restart: {}}]
        """, "steps[0]", "only after a warm restart step"),
    ("""\
        - name: p
          alerts: [X]
          steps: [{docker_restart: {container: v}}, {tpu_node_restart: {}}]
        """, "steps[1]", "set allow_cold: true"),
    ("""\
        - name: p
          alerts: [X]
          targets: [nope]
          steps: [{docker_restart: {container: v}}]
        """, "targets[0]", "unknown target 'nope'"),
    ("""\
        - name: p
          alerts: [X]
          cooldown: soon
          steps: [{docker_restart: {container: v}}]
        """, "cooldown", "duration"),
])
def test_mistakes_name_file_line_and_key(tmp_path: Path, policies: str, where: str,
                                         message: str) -> None:
    text = problems(tmp_path, policies)
    assert "sentinel.yaml:" in text and where in text and message in text, text


def test_node_restart_needs_the_targets_tpu_section(tmp_path: Path) -> None:
    text = problems(tmp_path, """\
        - name: p
          alerts: [X]
          allow_cold: true
          steps: [{docker_restart: {container: v}}, {tpu_node_restart: {}}]
        """)
    assert "tpu_node_restart" in text and "needs a tpu: section" in text
