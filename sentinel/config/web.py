"""The `web:` section: where the incident page links out to.

```yaml
web:
  # {target}, {alertname}, {from_ms} and {to_ms} (the incident's window) are filled in
  grafana_url: https://grafana.example.com/d/vllm/serving?var-target={target}&from={from_ms}&to={to_ms}
  # the rule's expression is added as /graph?g0.expr=…
  prometheus_url: http://prometheus.example.com:9090
```

A rule's `runbook_url` annotation is linked too, with no configuration.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import field_validator

from sentinel.config.base import Strict, problem

# What a grafana_url template may name; each value is URL-encoded where it is put.
PLACEHOLDERS = ("target", "alertname", "from_ms", "to_ms")


def _http(v: str) -> str:
    if v and (urlsplit(v).scheme not in ("http", "https") or not urlsplit(v).netloc):
        raise problem("must be an http:// or https:// URL")
    return v


class WebConfig(Strict):
    """Links out from the incident page."""

    # A Grafana (or any dashboard) URL template; {target}, {alertname}, {from_ms}, {to_ms}.
    grafana_url: str = ""
    # A Prometheus-compatible server's base URL: the page links to the graph of the
    # alert's expression there (/graph?g0.expr=…).
    prometheus_url: str = ""

    @field_validator("grafana_url")
    @classmethod
    def _check_template(cls, v: str) -> str:
        try:
            v.format(**{k: "0" for k in PLACEHOLDERS})
        except (KeyError, IndexError, ValueError) as exc:
            raise problem(f"unknown placeholder {exc} (known: "
                          f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)})") from None
        return _http(v)

    @field_validator("prometheus_url")
    @classmethod
    def _check_base(cls, v: str) -> str:
        return _http(v.rstrip("/"))
