"""The `query_backend:` section: rules query a Prometheus-compatible API, not the embedded store.

    query_backend:
      url: http://prometheus:9090          # Prometheus, Thanos, Mimir, VictoriaMetrics, GMP
      bearer_token_file: /run/secrets/prom # or basic_auth: {username, password_file}
      # or google_credentials: default (ADC) | /path/key.json (Managed Service for Prometheus;
      #    needs the google-auth package)
      timeout: 10s                         # budget of one query, retries included
      headers: {X-Scope-OrgID: team-a}     # e.g. Mimir's tenant
      method: POST                         # or GET (the parameters in the URL)
      scrape: false                        # also scrape `targets:` into the embedded store

Absent: rules read the embedded store (the default). With a backend, Sentinel
does not scrape its targets unless `scrape: true`: the backend's Prometheus
does. Targets stay listed for probes, log sources and remediation. Expressions
reading only series Sentinel writes itself (`sentinel_*`, ALERTS) still read
the embedded store; see sentinel/rules/backend.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sentinel.config.base import PositiveDuration, Strict, http_url, problem, unreadable

DEFAULT_TIMEOUT_MS = 10_000


class BasicAuthConfig(Strict):
    """HTTP basic auth; the password is read from a file (never written in the config)."""

    username: str = Field(min_length=1)
    password_file: str


class QueryBackendConfig(Strict):
    """Where and how rules query a Prometheus-compatible HTTP API."""

    url: str
    bearer_token_file: str | None = None
    basic_auth: BasicAuthConfig | None = None
    # "default" for Application Default Credentials, else a service-account key file.
    google_credentials: str | None = None
    timeout_ms: PositiveDuration = Field(DEFAULT_TIMEOUT_MS, alias="timeout")
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    # POST form (Prometheus's recommendation for long expressions) or GET with the
    # parameters in the URL (Managed Service for Prometheus documents GET).
    method: Literal["POST", "GET"] = "POST"
    scrape: bool = False

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        return http_url(value, what="query_backend URL").rstrip("/")

    @model_validator(mode="after")
    def _check_auth(self, info: ValidationInfo) -> QueryBackendConfig:
        chosen = [k for k in ("bearer_token_file", "basic_auth", "google_credentials")
                  if getattr(self, k) is not None]
        if len(chosen) > 1:
            raise problem(f"set only one of {', '.join(chosen)}", chosen[1])
        base = Path((info.context or {}).get("config_dir", "."))
        update: dict[str, Any] = {}
        if self.bearer_token_file is not None:
            update["bearer_token_file"] = _readable(base, self.bearer_token_file,
                                                    "bearer_token_file")
        if self.basic_auth is not None:
            path = _readable(base, self.basic_auth.password_file, "basic_auth",
                             "password_file")
            update["basic_auth"] = self.basic_auth.model_copy(update={"password_file": path})
        if self.google_credentials not in (None, "default"):
            update["google_credentials"] = _readable(base, str(self.google_credentials),
                                                     "google_credentials")
        lowered = {k.lower() for k in self.headers}
        if "authorization" in lowered and chosen:
            raise problem("an Authorization header and an auth setting conflict", "headers")
        return self.model_copy(update=update) if update else self


def _readable(base: Path, name: str, *where: str) -> str:
    """The file's absolute path; an error at `where` when it cannot be read now."""
    path = Path(name)
    if not path.is_absolute():
        path = base / path
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise problem(unreadable(path, exc), *where) from None
    return str(path)
