"""Regenerate the shipped compilation of the bundled signature file (see `shipped.py`).

    python -m sentinel.logs.shipgen [SIGNATURE_FILE]

Parses the file and chooses its anchors from scratch (no cache), then
writes `<name>.compiled.json` beside it. Prints the path written.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sentinel.logs import shipped
from sentinel.logs.signatures import SignatureSet, parse_signatures, signature_dicts


def generate(signature_file: Path) -> Path:
    """Write the shipped compilation of `signature_file`; return its path."""
    source = signature_file.read_bytes()
    sigset = SignatureSet(parse_signatures(source.decode("utf-8"), str(signature_file)),
                          "literal")  # anchors only: Hyperscan is compiled where it runs
    target = shipped.path_for(signature_file)
    target.write_text(shipped.render(source, signature_dicts(sigset.signatures),
                                     sigset.anchors), encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    """Regenerate for the given file, or the bundled rules/signatures.yaml."""
    args = sys.argv[1:] if argv is None else argv
    if args:
        path = Path(args[0])
    else:
        from sentinel.paths import bundled_dir

        path = bundled_dir("rules") / "signatures.yaml"
    print(generate(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
