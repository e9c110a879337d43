"""The docs site builds with `mkdocs build --strict`: a broken link or anchor fails.

.ci/run builds it too, before the tests; this keeps `python -m pytest` honest
about the docs on a developer's machine. The signature table the build hook
generates lists every shipped signature.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def _mkdocs() -> str:
    path = shutil.which("mkdocs")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mkdocs is required in CI (the test extra: mkdocs, mkdocs-material)")
        pytest.skip("mkdocs not installed (pip install -e '.[test]')")
    return path


def test_the_site_builds_strict(tmp_path: Path) -> None:
    done = subprocess.run([_mkdocs(), "build", "--strict", "--site-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "reference" / "signatures" / "index.html").read_text()
    shipped = yaml.safe_load((ROOT / "rules" / "signatures.yaml").read_text())["signatures"]
    for sig in shipped:
        assert f"<code>{sig['name']}</code>" in page
    assert "--8&lt;--" not in (tmp_path / "reference" / "examples" / "index.html").read_text()
