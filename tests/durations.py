"""Write tests/durations.txt from the output of `python -m pytest --durations=0`.

tests/conftest.py starts the longest tests first (read from durations.txt) so that
they overlap the many short ones on the test workers; a test missing from the file
counts as short. Refresh after adding a slow test:

    python -m pytest --durations=0 | tee /tmp/run.txt
    python tests/durations.py /tmp/run.txt > tests/durations.txt
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict

KEEP_S = 3.0  # shorter tests are ordered as collected
LINE = re.compile(r"^([0-9.]+)s (?:call|setup|teardown)\s+(\S+)")


def main(paths: list[str]) -> None:
    """Print seconds per test (setup + call + teardown), longest first."""
    total: dict[str, float] = defaultdict(float)
    for path in paths or ["/dev/stdin"]:
        with open(path, errors="replace") as f:
            for line in f:
                if m := LINE.match(line):
                    total[m.group(2)] += float(m.group(1))
    print("# Seconds per test (setup + call + teardown) in a full run on the 2-core CI machine;")
    print("# tests/conftest.py starts the longest first. Refresh: see tests/durations.py.")
    for name, s in sorted(total.items(), key=lambda kv: -kv[1]):
        if s >= KEEP_S:
            print(f"{s:7.1f} {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
