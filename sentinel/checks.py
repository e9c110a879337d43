"""`sentinel check config`: validate a config file and every rule file it names."""

from __future__ import annotations

from typing import TextIO

from sentinel.config import ConfigError, config_summary, load_config
from sentinel.daemon.app import rule_paths
from sentinel.daemon.sources import has_log_sources, signatures_path
from sentinel.logs.signatures import SignatureFileError, load_signature_file
from sentinel.rules.loader import RuleFileError, load_rule_files


def check_config(path: str, out: TextIO, err: TextIO) -> int:
    """Print a redacted summary and return 0 when the config and its rules are valid, else 1."""
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
    rules = sum(len(g.rules) for g in groups)
    print(config_summary(config), file=out)
    print(f"SUCCESS: {path} is valid ({len(paths)} rule files, {len(groups)} groups, "
          f"{rules} rules)", file=out)
    return 0
