"""Sentinel's configuration: one YAML file, validated strictly, every problem at once.

`load_config(path)` reads the file keeping each key's line (`yamlpos`),
expands `${VAR}` from the environment, validates with pydantic models that
forbid unknown keys, and raises one `ConfigError` listing every problem as
`FILE:LINE: key.path: message`. Durations are Prometheus durations in YAML
and integer milliseconds in Python (`scrape_interval` → `scrape_interval_ms`).
Secrets (webhook URLs, headers, the database password) never appear in
messages; `Config.secrets()` feeds the `Redactor`.

This module is the public face: the models live in `sentinel.config.model`,
loading, error reporting and the summary in `sentinel.config.load`.
"""

from __future__ import annotations

from sentinel.config.base import Duration, PositiveDuration
from sentinel.config.load import (
    ConfigError,
    ConfigProblem,
    config_summary,
    load_config,
    parse_config,
)
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

__all__ = [
    "Config",
    "ConfigError",
    "ConfigProblem",
    "DEFAULT_DATABASE",
    "DEFAULT_INTERVAL_MS",
    "DEFAULT_LISTEN",
    "DEFAULT_RETENTION_MS",
    "DEFAULT_TIMEOUT_MS",
    "DEFAULT_WEBHOOK_TIMEOUT_MS",
    "Duration",
    "PositiveDuration",
    "ReceiverConfig",
    "TargetConfig",
    "WebhookConfig",
    "config_summary",
    "load_config",
    "parse_config",
]
