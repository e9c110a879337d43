"""`sentinel check config`: validate a config file and every rule file it names.

Everything `sentinel run` would refuse is refused here first, with the same
lines and exit code: both call `sentinel.preflight`.

With `--scrape`, also scrape every target once and report each metric a
loaded rule selects that no target exposes (a rule that would be blind),
naming the replacement of a known vLLM rename; exit 1 when there is one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TextIO

from sentinel import exitcodes
from sentinel.alertrefs import format_refs, unknown_alert_refs
from sentinel.config import Config, ConfigError, config_summary, load_config
from sentinel.config.errors import load_error_lines
from sentinel.config.yamlpos import load_positioned
from sentinel.preflight import finding_lines, preflight
from sentinel.rules.loader import AlertingRule, RuleGroup


def check_config(path: str, out: TextIO, err: TextIO, *, strict: bool = False,
                 scrape: bool = False, offline: bool = False, network: bool = False) -> int:
    """Print a redacted summary and return 0 when `run` would start with this config.

    Everything `run` refuses is refused here first, with the same lines and exit code
    (`sentinel.preflight`). A reference to an alert no loaded rule defines is a
    warning, an error when `strict`; so is a TPU-only setting on a target configured
    `accelerator: gpu`. `offline` skips the checks that ask this host; `network`
    reaches the model endpoints and receivers (exit 4 when one does not answer).
    """
    try:
        config = load_config(path)
    except (ConfigError, OSError) as exc:
        print("\n".join(load_error_lines(exc, path)), file=err)
        return exitcodes.CONFIG
    pf = preflight(config, path, offline=offline, for_run=False, network=network,
                   strict=strict)
    for line in finding_lines(pf.findings):
        print(line, file=err)
    if pf.refused:
        return exitcodes.CONFIG if pf.config_is_wrong else exitcodes.UNAVAILABLE
    groups = pf.groups
    unknown = _unknown_alert_lines(path, config, groups) + _tpu_only_lines(path, config)
    for line in unknown:
        print(("error: " if strict else "warning: ") + line, file=err)
    if strict and unknown:
        return exitcodes.CONFIG
    rules = sum(len(g.rules) for g in groups)
    print(config_summary(config), file=out)
    if scrape and scrape_check(config, groups, out, err) != 0:
        return exitcodes.FAILURE
    print(f"SUCCESS: {path} is valid ({len(config.rule_paths())} rule files, "
          f"{len(groups)} groups, {rules} rules)", file=out)
    return exitcodes.OK


def _tpu_only_lines(path: str, config: Config) -> list[str]:
    from sentinel.config.accelerator_check import tpu_assumptions

    found = tpu_assumptions(config)
    if not found:
        return []
    doc = load_positioned(Path(path).read_text(encoding="utf-8"))
    return [f"{path}:{doc.line_of(a.path)}: {a.message}" for a in found]


def _unknown_alert_lines(path: str, config: Config, groups: list[RuleGroup]) -> list[str]:
    defined = {r.name for g in groups for r in g.rules if isinstance(r, AlertingRule)}
    refs = unknown_alert_refs(config, defined)
    if not refs:
        return []
    doc = load_positioned(Path(path).read_text(encoding="utf-8"))
    return format_refs(refs, path, doc.line_of)


def scrape_check(config: Config, groups: list[RuleGroup], out: TextIO, err: TextIO) -> int:
    """Scrape every target once; 1 when a rule would be blind, or when no target answered."""
    from sentinel.collect.scrape import Scraper
    from sentinel.daemon.scrapetarget import scrape_target
    from sentinel.rules.metriccheck import find_missing, rule_requirements, store_has
    from sentinel.rules.vllmnames import with_suggestion
    from sentinel.store import MemoryStore

    store = MemoryStore()
    scraper = Scraper(store)
    now_ms = int(time.time() * 1000)
    answered = 0
    try:
        for t in config.targets:
            # As `run` scrapes: its auth header, CA, client certificate and proxy.
            result = scraper.scrape(scrape_target(t), now_ms)
            if result.up:
                answered += 1
                print(f"scraped {t.name}: {result.samples} samples", file=out)
            else:
                print(f"{t.name}: scrape failed: {result.error}", file=err)
    finally:
        scraper.close()
    if not answered:
        print("no target could be scraped: cannot tell whether the rules see their metrics",
              file=err)
        return 1
    present = store_has(store, now_ms, 60_000)
    missing = find_missing(rule_requirements(groups), present)
    for m in missing:
        print(f"BLIND: {with_suggestion(m, present)}", file=err)
    return 1 if missing else 0
