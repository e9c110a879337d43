"""The `api:` section: bearer tokens for reading and writing.

```yaml
api:
  tokens:
    - name: oncall            # recorded in the audit log with every write
      role: write             # write may also read
      token: ${SENTINEL_WRITE_TOKEN}
    - name: grafana
      role: read
      token_file: /etc/sentinel/read.token
  allowed_hosts: [sentinel.example.com]   # names in Host besides external_url's
```

Reads need no token while Sentinel listens on loopback only; on any other
address every request needs a token, and starting there without one is refused.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sentinel.config.base import Strict, problem
from sentinel.config.notify import read_file_field

MIN_TOKEN_LEN = 16
# The values the shipped examples carry (deploy/kubernetes/secret.yaml): long enough
# for MIN_TOKEN_LEN, and public.
PLACEHOLDER_PREFIX = "CHANGE-ME"


class TokenConfig(Strict):
    """One named bearer token with a role."""

    name: str = Field(pattern=r"^[a-zA-Z0-9_.@-]+$")
    role: str = "read"
    token: str = Field("", repr=False)
    token_file: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _read_file(cls, data: Any, info: ValidationInfo) -> Any:
        return read_file_field(data, info, "token", required=True)

    @field_validator("role")
    @classmethod
    def _check_role(cls, v: str) -> str:
        if v not in ("read", "write"):
            raise problem("must be read or write")
        return v

    @field_validator("token")
    @classmethod
    def _check_token(cls, v: str) -> str:
        if len(v) < MIN_TOKEN_LEN:
            raise problem(f"a token needs at least {MIN_TOKEN_LEN} characters")
        if v.upper().startswith(PLACEHOLDER_PREFIX):
            raise problem(f"is the shipped placeholder ({PLACEHOLDER_PREFIX}-…), which anyone "
                          "can read: set a secret of your own, e.g. from `openssl rand -hex 32`")
        return v


class ApiConfig(Strict):
    """Tokens for the API, the page and MCP."""

    tokens: tuple[TokenConfig, ...] = ()
    # Host names the listener answers besides IP literals, loopback names and the
    # host of external_url (DNS rebinding check); "*.example.com" allows subdomains.
    allowed_hosts: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> ApiConfig:
        names: set[str] = set()
        values: set[str] = set()
        for i, t in enumerate(self.tokens):
            if t.name in names:
                raise problem(f"duplicate token name {t.name!r}", "tokens", i, "name")
            if t.token in values:
                raise problem("the same token is configured twice", "tokens", i, "token")
            names.add(t.name)
            values.add(t.token)
        return self

    def secrets(self) -> list[str]:
        """The token values, for the Redactor."""
        return [t.token for t in self.tokens]
