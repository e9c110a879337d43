"""The signature set's anchors, chosen once for the release and shipped beside the file.

Choosing prefilter anchors (`anchors.py`) costs seconds of CPU; the on-disk
cache (`sigcache.py`) only spares it from the second run on. So the bundled
`rules/signatures.yaml` has a generated neighbour, `signatures.compiled.json`:
its parsed signatures and their anchors, keyed by the SHA-256 of the file's
bytes and of the modules that parse it and choose anchors (`BUILDERS`). When
both hashes match, `load_signature_file` takes signatures and anchors from it
(no YAML parse, no anchor choice), compiles only Hyperscan (a tenth of a
second) and caches the whole set on disk as usual. A file edited by a user,
or a changed builder, does not match: it is compiled and cached on first use.

Regenerate it after editing the file or a builder (a test fails until then):

    python -m sentinel.logs.shipgen

Nothing here raises: a missing, stale or damaged file only means compiling.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

FORMAT = 1
SUFFIX = ".compiled.json"
_HERE = Path(__file__).resolve().parent
# The modules whose code decides what the shipped file holds (parse and anchors).
BUILDERS = (_HERE / "signatures.py", _HERE / "anchors.py",
            _HERE.parent / "config" / "yamlpos.py")


def path_for(signature_file: str | Path) -> Path:
    """Where the shipped compilation of `signature_file` lives (beside it)."""
    path = Path(signature_file)
    return path.with_name(path.stem + SUFFIX)


def builder_hash() -> str:
    """SHA-256 over the builder modules' source (a missing one counts by its name)."""
    h = hashlib.sha256(f"format {FORMAT}\0".encode())
    for path in BUILDERS:
        try:
            h.update(path.read_bytes())
        except OSError:
            h.update(path.name.encode())
        h.update(b"\0")
    return h.hexdigest()


def render(source: bytes, signatures: list[dict[str, Any]], anchors: tuple[str, ...]) -> str:
    """The shipped file's text for `source` (the signature file's bytes)."""
    return json.dumps({
        "generated_by": "python -m sentinel.logs.shipgen (do not edit)",
        "format": FORMAT,
        "source_sha256": hashlib.sha256(source).hexdigest(),
        "builders_sha256": builder_hash(),
        "anchors": list(anchors),
        "signatures": signatures,
    }, indent=1, ensure_ascii=False) + "\n"


def read(signature_file: str | Path, source: bytes) -> dict[str, Any] | None:
    """The shipped `signatures` (dicts) and `anchors` for these bytes, or None if not current."""
    try:
        doc = json.loads(path_for(signature_file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT \
            or doc.get("source_sha256") != hashlib.sha256(source).hexdigest() \
            or doc.get("builders_sha256") != builder_hash():
        return None
    if not isinstance(doc.get("signatures"), list) or not isinstance(doc.get("anchors"), list):
        return None
    return doc
