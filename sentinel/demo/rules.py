"""The shipped rules with their clocks sped up, for the demo and bench/pagestream.py.

A rule that waits 2 minutes in production (`for: 2m`, `[1m]` windows) waits
2m / scale here; everything else (expressions, labels, annotations) is the
shipped rule unchanged, so Prometheus and Sentinel read the same file.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

import yaml

from sentinel.config.durations import parse_duration
from sentinel.paths import bundled_dir

_RANGE = re.compile(r"\[(\d+(?:ms|[smhd]))\]")


def scaled_rules(dest: Path, scale: int, groups: Collection[str] | None = None,
                 source: str = "vllm.yaml") -> Path:
    """Write the bundled rule file `source` to `dest` with the `for`s, `keep_firing_for`s and
    range selectors of `groups` (every group when None) divided by `scale`."""
    doc = yaml.safe_load((bundled_dir("rules") / source).read_text())
    for group in doc["groups"]:
        if groups is not None and group["name"] not in groups:
            continue
        for rule in group["rules"]:
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    rule[key] = _scaled(rule[key], scale)
            rule["expr"] = _RANGE.sub(lambda m: f"[{_scaled(m.group(1), scale)}]", rule["expr"])
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def _scaled(duration: str, scale: int) -> str:
    # Milliseconds: both Prometheus and Sentinel read "7500ms".
    return f"{parse_duration(duration) // scale}ms"


def self_alerts() -> frozenset[str]:
    """The alert names of the bundled rules/sentinel.yaml: Sentinel watching itself (missed
    scrapes and evaluations, a stuck worker), not the servers."""
    doc = yaml.safe_load((bundled_dir("rules") / "sentinel.yaml").read_text())
    return frozenset(r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r)
