"""`sentinel rules check FILE...`: validate rule files and report like `promtool check rules`.

    Checking rules/vllm.yaml
      SUCCESS: 3 rules found

    Checking bad.yaml
      FAILED:
    bad.yaml:5:11: group "g", rule 1, "A": could not parse expression: ...

Each file is checked on its own, as promtool does (group names need only
be unique within a file here; the daemon's loader also checks across files).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from sentinel.rules.loader import parse_rule_file


def check_rule_files(paths: Sequence[str], out: TextIO,
                     features: frozenset[str] = frozenset()) -> int:
    """Check each file; 0 when all are valid, 1 otherwise (`features`: experimental PromQL)."""
    failed = False
    for path in paths:
        out.write(f"Checking {path}\n")
        groups, problems = parse_rule_file(str(path), features)
        if problems:
            failed = True
            out.write("  FAILED:\n")
            for p in problems:
                out.write(p + "\n")
        else:
            n = sum(len(g.rules) for g, _ in groups)
            out.write(f"  SUCCESS: {n} rules found\n")
        out.write("\n")
    return 1 if failed else 0
