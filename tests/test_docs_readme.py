"""The README stays a five-minute page: small, the two commands first, links that resolve."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def test_readme_is_under_10_kb() -> None:
    assert len(README.read_bytes()) < 10_000


def test_readme_opens_with_the_two_commands() -> None:
    first_block = re.search(r"```sh\n(.*?)```", README.read_text(), re.S)
    assert first_block is not None
    assert first_block.group(1).splitlines()[:2] == [
        "pip install -e . && sentinel demo",
        "pip install -e '.[test]' && python -m pytest",
    ]


def test_readme_links_point_at_files_that_exist() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert len(local) > 20
    missing = [link for link in local if not (ROOT / link).exists()]
    assert missing == []
