"""axe-core (npm's accessibility engine), pinned, fetched once into a cache, run in the browser.

    python tests/axe.py fetch    # what .ci/run does: download, check sha512, unpack axe.min.js

The library (~550 kB) is not committed: `fetch` downloads the pinned tarball
from the npm registry, checks it against the registry's sha512 integrity
value written below, and keeps only `axe.min.js` under `.ci/cache/`. Tests
never reach the network: `axe_source()` reads the cached file, and skips
(locally) or fails (CI=true) when it is absent. `violations()` injects it into
the page Selenium has open and runs it there.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import sys
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

VERSION = "4.14.1"
INTEGRITY = ("sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFoo"
             "JpZe37OgudVGtQ==")
TARBALL = f"https://registry.npmjs.org/axe-core/-/axe-core-{VERSION}.tgz"
CACHE = Path(os.environ.get("SENTINEL_AXE_CACHE") or
             Path(__file__).resolve().parents[1] / ".ci" / "cache") / f"axe-core-{VERSION}"
SCRIPT = CACHE / "axe.min.js"
# What must not be on any page; "moderate" and "minor" are reported, not failed.
BLOCKING = ("serious", "critical")


def fetch() -> Path:
    """Download the pinned tarball, check its integrity, unpack axe.min.js; its path."""
    if SCRIPT.exists():
        return SCRIPT
    with urllib.request.urlopen(TARBALL, timeout=60) as r:  # noqa: S310 (a fixed https URL)
        data = r.read()
    algo, _, want = INTEGRITY.partition("-")
    got = base64.b64encode(hashlib.new(algo, data).digest()).decode()
    if got != want:
        raise SystemExit(f"axe-core {VERSION}: integrity mismatch ({algo} {got}, want {want})")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        member = tar.extractfile("package/axe.min.js")
        assert member is not None
        body = member.read()
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = SCRIPT.with_suffix(".tmp")
    tmp.write_bytes(body)
    tmp.replace(SCRIPT)
    return SCRIPT


def axe_source() -> str:
    """The cached axe.min.js; skip without it (fail under CI=true)."""
    import pytest

    if not SCRIPT.exists():
        why = f"axe-core {VERSION} is not in {CACHE} (run: python tests/axe.py fetch)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return SCRIPT.read_text(encoding="utf-8")


def violations(b: Any, source: str) -> list[dict[str, Any]]:
    """axe-core's violations on the page `b` shows (WCAG 2.x A and AA rules, best practices)."""
    # Injected through WebDriver, not a <script src>: the page's CSP allows only
    # Sentinel's own scripts, and the test must not loosen it.
    b.execute_script(source + "\n;window.__axe = axe;")
    result = b.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "window.__axe.run(document, {resultTypes: ['violations']})"
        ".then(r => done(r.violations)).catch(e => done([{id: 'axe-error', impact: 'critical',"
        " description: String(e), nodes: []}]));")
    return list(result or [])


def blocking(found: list[dict[str, Any]]) -> list[str]:
    """The serious and critical violations, one readable line each (rule, elements)."""
    return [f"{v['id']} ({v['impact']}): {v.get('help') or v.get('description')}: "
            + "; ".join(str(n.get("target")) + " " + str(n.get("failureSummary", ""))[:160]
                        for n in v.get("nodes", [])[:4])
            for v in found if v.get("impact") in BLOCKING]


if __name__ == "__main__":
    if sys.argv[1:] != ["fetch"]:
        raise SystemExit("usage: python tests/axe.py fetch")
    print(fetch())
