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


_CODE = re.compile(r"`[^`\n]*`")


def unescape_table_code(markdown: str) -> str:
    """`a\\|b` in a table's code span becomes `a|b`.

    GitHub needs the pipe escaped even inside a code span of a table row;
    Python-Markdown's tables already ignore pipes in code spans and would show
    the backslash. The pages are written for GitHub; the site drops the escape.
    """
    lines = markdown.split("\n")
    for i, line in enumerate(lines):
        if line.lstrip().startswith("|") and "\\|" in line:
            lines[i] = _CODE.sub(lambda m: m.group(0).replace("\\|", "|"), line)
    return "\n".join(lines)


_INCLUDE_MD = re.compile(r'^--8<-- "([^"]+\.md)"$', re.M)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the marker with the generated table; unescape pipes in tables' code.

    A Markdown file included whole (`--8<-- "bench/README.md"`) is inlined here,
    before the snippets extension runs, so its tables are unescaped too.
    """
    markdown = _INCLUDE_MD.sub(
        lambda m: (ROOT / m.group(1)).read_text(encoding="utf-8"), markdown)
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, signatures_table())
    return unescape_table_code(markdown)
