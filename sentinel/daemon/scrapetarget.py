"""A configured target as the scraper's ScrapeTarget: one mapping, for `run` and `check config`.

`check config --scrape` scrapes with this too, so it sends the same Authorization
header, trusts the same CA and goes through the same proxy as `run`: no false
failure for an authenticated target, no false success behind a proxy.
"""

from __future__ import annotations

from typing import Any

from sentinel.collect.scrape import ScrapeTarget
from sentinel.collect.tlssettings import TLSSettings
from sentinel.model import labels_of


def scrape_target(target: Any) -> ScrapeTarget:  # noqa: ANN401 (config.TargetConfig)
    """The ScrapeTarget of a config target, with its auth, TLS and proxy settings."""
    return ScrapeTarget(
        name=target.name, url=target.url, metrics_path=target.metrics_path,
        labels=labels_of(dict(target.labels)),
        interval_ms=target.scrape_interval_ms, timeout_ms=target.scrape_timeout_ms,
        sample_limit=target.sample_limit, label_limit=target.label_limit,
        auth_header=target.auth_header(), tls=tls_settings(target.tls_config),
        proxy_url=target.proxy_url,
    )


def tls_settings(cfg: Any) -> TLSSettings | None:  # noqa: ANN401 (config.scrapeclient.TLSConfig)
    """The scrape's TLS settings from a target's tls_config (paths relative to the config's
    folder are resolved by the config model)."""
    if cfg is None:
        return None
    return TLSSettings(cfg.ca_file, cfg.cert_file, cfg.key_file, cfg.server_name,
                       cfg.insecure_skip_verify)
