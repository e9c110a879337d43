"""Who may do what: bearer tokens (read, write), page sessions with CSRF, the bind check.

- A request names itself with `Authorization: Bearer <token>`; tokens are
  compared in constant time (`hmac.compare_digest`, against every configured
  token, so timing tells nothing about which one nearly matched).
- Reads need no token while Sentinel listens on loopback only.
- Writes need a write token. The page gets one through a login form: the
  token is checked and a signed session cookie (token *name*, expiry, HMAC
  with a per-process key) is set; the token itself is kept nowhere. Every form
  the page posts carries a CSRF value derived from that session.
- Listening beyond loopback with no token configured is refused at start.
- Tokens follow a reload (`replace_tokens`): a token added works at once, a token
  removed (or whose role changed) stops working, and so do the page sessions it
  opened; the sessions of the tokens that stay keep working.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sentinel.api.errors import ApiError
from sentinel.config.api import TokenConfig

SESSION_COOKIE = "sentinel_session"
SESSION_TTL_S = 12 * 3600
# What a login or a bearer token meets when the config has no api.tokens (the default).
NO_TOKENS = ("no API tokens are configured, so no token can log in: add a write token "
             "to the config (api: tokens: [{name: you, role: write, token: "
             "${SENTINEL_WRITE_TOKEN}}], a secret of 16+ characters, e.g. from `openssl "
             "rand -hex 32`) and reload (SIGHUP or POST /-/reload); no restart is needed")


class BindRefused(Exception):
    """Sentinel would listen beyond loopback without any token configured."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking: a token's name and role, or the anonymous loopback reader."""

    name: str
    role: str  # read, write, anonymous
    via: str  # bearer, session, none

    @property
    def can_write(self) -> bool:
        """Whether this principal may change anything."""
        return self.role == "write"


ANONYMOUS = Principal("anonymous", "anonymous", "none")


def is_loopback(host: str) -> bool:
    """Whether a listen host only accepts connections from this machine."""
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, tokens: Sequence[TokenConfig]) -> None:
    """Refuse a non-loopback listen address when no token protects it."""
    if not is_loopback(host) and not tokens:
        raise BindRefused(
            f"refusing to listen on {host or '0.0.0.0'} (not loopback) without an API token: "
            "configure api.tokens (a read and a write token) or listen on 127.0.0.1")


class Auth:
    """Checks bearer tokens and page sessions; issues sessions and CSRF values."""

    def __init__(self, tokens: Sequence[TokenConfig], reads_open: bool,
                 clock: Callable[[], float] = time.time, key: bytes | None = None) -> None:
        self._tokens = [(t.name, t.role, t.token.encode()) for t in tokens]
        self.reads_open = reads_open
        self.clock = clock
        self._key = key or os.urandom(32)
        # Sessions logged out before they expire: signature -> expiry (s). Pruned as
        # they expire, so it holds at most the sessions of one TTL.
        self._revoked: dict[str, int] = {}
        self._revoked_lock = threading.Lock()

    @property
    def has_tokens(self) -> bool:
        """Whether any token is configured (else nobody can log in or write)."""
        return bool(self._tokens)

    def replace_tokens(self, tokens: Sequence[TokenConfig]) -> None:
        """The tokens of a reloaded config; sessions of tokens gone or changed end now."""
        # One assignment: a request sees the old list or the new one, never a mix.
        self._tokens = [(t.name, t.role, t.token.encode()) for t in tokens]

    def from_bearer(self, header: str | None) -> Principal | None:
        """The principal a bearer header names; None when absent; 401 when wrong."""
        if not header:
            return None
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise ApiError(401, "the Authorization header is not 'Bearer <token>': send one of "
                           "the api.tokens as a bearer token")
        return self.check_token(value.strip())

    def check_token(self, token: str) -> Principal:
        """The principal of a token value (constant-time against all), or 401."""
        given = token.encode()
        found: tuple[str, str] | None = None
        for name, role, value in self._tokens:
            if hmac.compare_digest(given, value) and found is None:
                found = (name, role)
        if found is None and not self._tokens:
            raise ApiError(401, NO_TOKENS)
        if found is None:
            raise ApiError(401, "unknown token: the bearer token sent matches none of the "
                           "configured api.tokens")
        return Principal(found[0], found[1], "bearer")

    def principal(self, bearer: str | None, cookie: str | None) -> Principal:
        """Who asks: bearer token first, then the page's session, else anonymous."""
        p = self.from_bearer(bearer)
        if p is not None:
            return p
        s = self.session_principal(cookie)
        return s if s is not None else ANONYMOUS

    def require_read(self, p: Principal) -> None:
        """401 unless reads are open or a token was given."""
        if p.role == "anonymous" and not self.reads_open:
            raise ApiError(401, "missing token: reading needs a read or write token and none "
                           "was sent (Authorization: Bearer <token>; amtool: "
                           "--http.config.file with authorization.credentials)")

    def require_write(self, p: Principal) -> None:
        """401 without a token, 403 with a read-only one."""
        if p.role == "anonymous":
            raise ApiError(401, "missing token: this request changes something and needs a "
                           "write token; none was sent (Authorization: Bearer <token>; amtool: "
                           "--http.config.file with authorization.credentials)")
        if not p.can_write:
            raise ApiError(403, f"token {p.name!r} is a read token: this request needs a "
                           "write token")

    # -- page sessions -------------------------------------------------------

    def new_session(self, p: Principal) -> str:
        """A signed cookie value naming the principal (never holding the token)."""
        expires = int(self.clock()) + SESSION_TTL_S
        body = f"{p.name}|{p.role}|{expires}"
        return f"{body}|{self._sign('session', body)}"

    def session_principal(self, cookie: str | None) -> Principal | None:
        """The principal of a valid, unexpired session cookie."""
        parsed = self._parse_session(cookie)
        if parsed is None:
            return None
        name, role, expires, mac = parsed
        if int(expires) < self.clock() or mac in self._revoked:
            return None
        if not any(n == name and r == role for n, r, _ in self._tokens):
            return None  # its token was removed, or its role changed, by a reload
        return Principal(name, role, "session")

    def _parse_session(self, cookie: str | None) -> tuple[str, str, str, str] | None:
        """A cookie's (name, role, expiry, signature) when its signature is ours."""
        if not cookie or not cookie.isascii():  # a forged non-ASCII value is no session
            return None
        parts = cookie.split("|")
        if len(parts) != 4:
            return None
        body, mac = "|".join(parts[:3]), parts[3]
        if not hmac.compare_digest(mac.encode(), self._sign("session", body).encode()):
            return None
        if not (parts[2].isascii() and parts[2].isdigit()) or len(parts[2]) > 12:
            return None
        return parts[0], parts[1], parts[2], mac

    def revoke(self, cookie: str | None) -> None:
        """End a session before its expiry (logout): its cookie is refused from now on."""
        parsed = self._parse_session(cookie)
        if parsed is None:
            return
        now = self.clock()
        with self._revoked_lock:
            self._revoked = {m: e for m, e in self._revoked.items() if e >= now}
            self._revoked[parsed[3]] = int(parsed[2])

    def csrf_for(self, cookie: str | None) -> str:
        """The CSRF value the page's forms carry for this session ("" without one)."""
        return self._sign("csrf", cookie) if cookie else ""

    def check_csrf(self, cookie: str | None, value: str | None) -> None:
        """403 unless the form's CSRF value belongs to the session."""
        if not cookie or not value or not hmac.compare_digest(self.csrf_for(cookie).encode(),
                                                              value.encode()):
            raise ApiError(403, "missing or wrong CSRF value: reload the page and try again")

    def _sign(self, purpose: str, body: str) -> str:
        return hmac.new(self._key, f"{purpose}:{body}".encode(), hashlib.sha256).hexdigest()
