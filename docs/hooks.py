"""MkDocs hook: tables generated from the files Sentinel ships, at build time.

`<!-- generated: signatures -->` in a page becomes the table of the crash
signatures in rules/signatures.yaml (name, category, severity, the alert that
category raises, the first line of its runbook), so the page lists exactly
what the classifier loads.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- generated: signatures -->"


def signatures_table(path: Path = ROOT / "rules" / "signatures.yaml") -> str:
    """A Markdown table of the crash signatures, with the alert each category raises."""
    alerts = _alerts_by_category()
    rows = ["| signature | category | severity | alert | what it means |", "|---|---|---|---|---|"]
    for sig in yaml.safe_load(path.read_text(encoding="utf-8"))["signatures"]:
        runbook = " ".join((sig.get("runbook") or "").split())
        first = re.split(r"(?<=\.) ", runbook, maxsplit=1)[0].replace("|", "\\|")
        rows.append(f"| `{sig['name']}` | `{sig['category']}` | {sig['severity']} | "
                    f"{alerts.get(sig['category'], '—')} | {first} |")
    return "\n".join(rows)


def _alerts_by_category() -> dict[str, str]:
    out: dict[str, str] = {}
    doc = yaml.safe_load((ROOT / "rules" / "vllm.yaml").read_text(encoding="utf-8"))
    for group in doc["groups"]:
        for rule in group["rules"]:
            m = re.search(r'category=~?"([^"]+)"', rule.get("expr", ""))
            if "alert" in rule and m and "sentinel_log_signature_matches_total" in rule["expr"]:
                for category in m.group(1).split("|"):
                    out.setdefault(category, f"`{rule['alert']}`")
    return out


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the marker with the generated table."""
    return markdown.replace(MARKER, signatures_table()) if MARKER in markdown else markdown
