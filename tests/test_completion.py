"""`sentinel completion bash|zsh`: the scripts load in the shell and complete the parser's words."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def script(shell: str) -> str:
    out = subprocess.run([sys.executable, "-m", "sentinel", "completion", shell],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    return out.stdout


def complete_in_bash(path: Path, words: list[str]) -> list[str]:
    """What bash offers for the last word, as the completion function is called at a Tab."""
    line = " ".join(words)
    code = (f"source {path}\n"
            f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
            f"COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}\n"
            f"_shtab_sentinel sentinel {words[-1]!r} {words[-2]!r}\n"
            'printf "%s\\n" "${COMPREPLY[@]}"\n')
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and not out.stderr, out.stderr
    return out.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_the_bash_script_loads_and_completes_subcommands_and_options(tmp_path: Path) -> None:
    path = tmp_path / "sentinel.bash"
    path.write_text(script("bash"))
    assert complete_in_bash(path, ["sentinel", "ch"]) == ["check"]
    assert complete_in_bash(path, ["sentinel", "check", ""]) == ["config"]
    # Generated from the parser: this session's --offline is there without editing a script.
    assert complete_in_bash(path, ["sentinel", "check", "config", "--of"]) == ["--offline"]
    assert "completion" in complete_in_bash(path, ["sentinel", "co"])


def test_the_zsh_script_is_a_compdef_for_sentinel() -> None:
    text = script("zsh")
    assert text.startswith("#compdef sentinel")
    assert "--offline" in text and "completion" in text
    if shutil.which("zsh"):
        out = subprocess.run(["zsh", "-n", "-c", text], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 0, out.stderr


def test_an_unknown_shell_is_a_usage_error() -> None:
    out = subprocess.run([sys.executable, "-m", "sentinel", "completion", "fish"],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and "invalid choice" in out.stderr
