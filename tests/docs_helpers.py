"""Helpers for the tests that run what the docs and the example configs say."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from sentinel.paths import bundled_dir


def name_bundled_rules_if_none_load(config: Path, env: dict[str, str]) -> bool:
    """Add `rule_files: [<bundled>/vllm.yaml]` when `check config` loads no rule; True if added.

    The docs and examples rely on the bundled rules being the default when
    `rule_files` is absent (issue 36). A Sentinel that already does so loads
    them and this changes nothing; one that loads none gets them named, so
    the rest of the check (alert names in policies and routes) still means
    something. A config that sets `rule_files` is left alone.
    """
    text = config.read_text()
    if re.search(r"^rule_files:", text, re.M):
        return False
    out = subprocess.run(["sentinel", "check", "config", config.name], cwd=config.parent,
                         env=env, capture_output=True, text=True, timeout=60).stdout
    if not re.search(r"\b0 rules\)", out):
        return False
    config.write_text(text + f"rule_files: [{bundled_dir('rules') / 'vllm.yaml'}]\n")
    return True
