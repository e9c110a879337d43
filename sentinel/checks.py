"""`sentinel check config`: validate a config file and every rule file it names."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from sentinel.alertrefs import format_refs, unknown_alert_refs
from sentinel.config import Config, ConfigError, config_summary, load_config
from sentinel.daemon.app import rule_paths
from sentinel.daemon.sources import has_log_sources, signatures_path
from sentinel.logs.signatures import SignatureFileError, load_signature_file
from sentinel.rules.loader import AlertingRule, RuleFileError, RuleGroup, load_rule_files
from sentinel.yamlpos import load_positioned


def check_config(path: str, out: TextIO, err: TextIO, *, strict: bool = False) -> int:
    """Print a redacted summary and return 0 when the config and its rules are valid, else 1.

    A reference to an alert no loaded rule defines is a warning, an error when `strict`.
    """
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(f"{path}: invalid configuration:\n{exc}", file=err)
        return 1
    except OSError as exc:
        print(f"{path}: cannot read: {exc}", file=err)
        return 1
    paths = rule_paths(config)
    if config.rule_files and not paths:
        print(f"{path}: rule_files {list(config.rule_files)} match no file", file=err)
        return 1
    try:
        groups = load_rule_files(paths)
    except RuleFileError as exc:
        print(f"{path}: invalid rule files:\n{exc}", file=err)
        return 1
    if has_log_sources(config):
        try:
            load_signature_file(signatures_path(config))
        except SignatureFileError as exc:
            print(f"{path}: invalid crash signatures:\n{exc}", file=err)
            return 1
    unknown = _unknown_alert_lines(path, config, groups)
    for line in unknown:
        print(("error: " if strict else "warning: ") + line, file=err)
    if strict and unknown:
        return 1
    rules = sum(len(g.rules) for g in groups)
    print(config_summary(config), file=out)
    print(f"SUCCESS: {path} is valid ({len(paths)} rule files, {len(groups)} groups, "
          f"{rules} rules)", file=out)
    return 0


def _unknown_alert_lines(path: str, config: Config, groups: list[RuleGroup]) -> list[str]:
    defined = {r.name for g in groups for r in g.rules if isinstance(r, AlertingRule)}
    refs = unknown_alert_refs(config, defined)
    if not refs:
        return []
    doc = load_positioned(Path(path).read_text(encoding="utf-8"))
    return format_refs(refs, path, doc.line_of)
