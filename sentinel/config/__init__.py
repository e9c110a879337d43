"""Sentinel's configuration: one YAML file, validated strictly, every problem at once.

`load_config(path)` reads the file keeping each key's line (`yamlpos`),
expands `${VAR}` from the environment, validates with pydantic models that
forbid unknown keys, and raises one `ConfigError` listing every problem as
`FILE:LINE: key.path: message`. Durations are Prometheus durations in YAML
and integer milliseconds in Python (`scrape_interval` → `scrape_interval_ms`).
Secrets (webhook URLs, headers, the database password) never appear in
messages; `Config.secrets()` feeds the `Redactor`.

The package:

    model.py      the top-level `Config` and its targets, receivers, rules keys
    base.py       what every section shares (strict models, durations, problems)
    load.py       loading a file, error reporting, the redacted summary
    errors.py     ConfigError and ConfigProblem (no pydantic: cheap to import)
    database.py   only the `database` key, for read-only commands
    sources.py, probe.py, notify.py, diagnosis.py, remediation.py, kubernetes.py,
    alert_restore.py, api.py   one module per section
    yamlpos.py    YAML with the line of every key; durations.py  Prometheus durations

This module is the public face. Its names are imported on first use (PEP 562),
so `import sentinel.config.durations` (the rule loader, the CLI) does not pay
for building every pydantic model.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sentinel.config.base import Duration, PositiveDuration
    from sentinel.config.errors import ConfigError, ConfigProblem
    from sentinel.config.load import config_summary, load_config, parse_config
    from sentinel.config.model import (
        DEFAULT_DATABASE,
        DEFAULT_INTERVAL_MS,
        DEFAULT_LISTEN,
        DEFAULT_RETENTION_MS,
        DEFAULT_TIMEOUT_MS,
        DEFAULT_WEBHOOK_TIMEOUT_MS,
        Config,
        ReceiverConfig,
        TargetConfig,
        WebhookConfig,
    )

_WHERE = {
    "Duration": "base", "PositiveDuration": "base",
    "ConfigError": "errors", "ConfigProblem": "errors",
    "config_summary": "load", "load_config": "load", "parse_config": "load",
    "DEFAULT_DATABASE": "model", "DEFAULT_INTERVAL_MS": "model", "DEFAULT_LISTEN": "model",
    "DEFAULT_RETENTION_MS": "model", "DEFAULT_TIMEOUT_MS": "model",
    "DEFAULT_WEBHOOK_TIMEOUT_MS": "model", "Config": "model", "ReceiverConfig": "model",
    "TargetConfig": "model", "WebhookConfig": "model",
}

__all__ = [
    "DEFAULT_DATABASE", "DEFAULT_INTERVAL_MS", "DEFAULT_LISTEN", "DEFAULT_RETENTION_MS",
    "DEFAULT_TIMEOUT_MS", "DEFAULT_WEBHOOK_TIMEOUT_MS", "Config", "ConfigError",
    "ConfigProblem", "Duration", "PositiveDuration", "ReceiverConfig", "TargetConfig",
    "WebhookConfig", "config_summary", "load_config", "parse_config",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sentinel.config' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"sentinel.config.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
