"""How Sentinel reaches a target's /metrics: auth, TLS and a proxy, in Prometheus's key names.

```yaml
# top level: the defaults every target inherits (a target's own keys replace them whole)
authorization: {type: Bearer, credentials_file: /run/secrets/vllm-metrics-token}
targets:
  - name: gemma-b
    url: https://10.0.0.6:8000
    basic_auth: {username: sentinel, password_file: /run/secrets/metrics-password}
    tls_config: {ca_file: /etc/sentinel/ca.pem, server_name: gemma-b.internal}
    proxy_url: http://proxy.internal:3128
```

Secrets come inline (usually `${VAR}`) or from `*_file` (relative to the config's
folder) and are handed to the Redactor. Only one of `authorization` and
`basic_auth` per target, as in Prometheus. A proxy is an HTTP proxy for http
targets (absolute-form requests); an https target through a proxy (CONNECT) is
refused at load rather than silently sent direct.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Protocol, cast

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sentinel.config.base import Strict, http_url, problem, unreadable
from sentinel.config.notify import read_file_field

CLIENT_KEYS = ("authorization", "basic_auth", "tls_config", "proxy_url")


class AuthorizationConfig(Strict):
    """An `Authorization: <type> <credentials>` header on every scrape."""

    type: str = Field("Bearer", pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")
    credentials: str = Field("", repr=False)  # secret
    credentials_file: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any, info: ValidationInfo) -> Any:
        return read_file_field(data, info, "credentials", required=True)

    def header(self) -> str:
        """The header's value."""
        return f"{self.type} {self.credentials.strip()}"


class BasicAuthConfig(Strict):
    """HTTP basic auth on every scrape."""

    username: str = Field(min_length=1)
    password: str = Field("", repr=False)  # secret
    password_file: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any, info: ValidationInfo) -> Any:
        return read_file_field(data, info, "password", required=False)

    def header(self) -> str:
        """The header's value."""
        raw = f"{self.username}:{self.password.strip()}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")


class TLSConfig(Strict):
    """How an https target's certificate is checked, and the client certificate shown."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    insecure_skip_verify: bool = False

    @field_validator("ca_file", "cert_file", "key_file")
    @classmethod
    def _readable(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is None:
            return None
        path = Path(v)
        if not path.is_absolute():
            path = Path((info.context or {}).get("config_dir", ".")) / path
        try:
            with path.open("rb"):
                pass
        except OSError as exc:
            raise problem(unreadable(path, exc)) from None
        return str(path)

    @model_validator(mode="after")
    def _pair(self) -> TLSConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise problem("cert_file and key_file go together", "cert_file")
        return self


class ScrapeClientMixin:
    """The four keys' behaviour, for a model that declares them (a target, and the top level
    as defaults). The fields are declared by each model, after its own, so an error's list
    of known keys reads name, url, ... first."""

    # No annotations here: pydantic would take them for fields, listed before the model's.

    def check_client(self) -> None:
        """Refuse both auth kinds at once, and a proxy that is not http://."""
        k = cast(_Keys, self)
        if k.authorization is not None and k.basic_auth is not None:
            raise problem("set authorization or basic_auth, not both", "basic_auth")
        if k.proxy_url is not None:
            http_url(k.proxy_url, what="proxy URL")
            if not k.proxy_url.startswith("http://"):
                raise problem("only an http:// proxy is supported", "proxy_url")

    def auth_header(self) -> str | None:
        """The Authorization header's value, if any."""
        k = cast(_Keys, self)
        if k.authorization is not None:
            return k.authorization.header()
        if k.basic_auth is not None:
            return k.basic_auth.header()
        return None

    def client_secrets(self) -> list[str]:
        """The secret values, for the Redactor."""
        k = cast(_Keys, self)
        out = []
        if k.authorization is not None and k.authorization.credentials:
            out.append(k.authorization.credentials.strip())
        if k.basic_auth is not None and k.basic_auth.password:
            out.append(k.basic_auth.password.strip())
        return out


class _Keys(Protocol):
    authorization: AuthorizationConfig | None
    basic_auth: BasicAuthConfig | None
    tls_config: TLSConfig | None
    proxy_url: str | None


def inherit_client_keys(target: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """A target's raw mapping with the top-level client keys it does not set itself.

    The two auth keys go as a pair: a target with its own basic_auth does not also
    inherit the default authorization.
    """
    own_auth = "authorization" in target or "basic_auth" in target
    inherited = {k: top[k] for k in CLIENT_KEYS if k in top and k not in target
                 and not (own_auth and k in ("authorization", "basic_auth"))}
    return {**inherited, **target}
