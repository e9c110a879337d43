"""Secrets: resolve them from the environment or files, and keep them out of text.

Webhook URLs carry tokens in their path or query, headers carry API keys,
database URLs carry passwords. Every message that leaves Sentinel (logs,
stored notification details, error strings) goes through a `Redactor`, which
replaces the known secret strings and anything that looks like a credential
in a URL with "<redacted>".
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

REDACTED = "<redacted>"

# Secrets shorter than this are not replaced verbatim: a one-character
# "secret" would blank out every occurrence of that character in a log.
MIN_SECRET_LEN = 3

# A URL path segment at least this long is treated as a token on its own.
TOKEN_SEGMENT_LEN = 16

_ENV_REF = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

# scheme://user:password@host: keep the user, hide the password.
# The scheme is bounded and the runs possessive: an unbounded `[a-z0-9.-]*` before
# "://" rescanned the rest of the line from every word start (O(n^2) on "a.a.a...").
_URL_CREDENTIALS = re.compile(
    r"(?P<pre>\b[a-zA-Z][a-zA-Z0-9+.-]{0,30}+://[^\s/:@]*+:)[^\s/@]++(?=@)")
# ?token=…, &api_key=…, &sig=…: hide the value of parameters named like credentials.
_QUERY_SECRET = re.compile(
    r"(?P<pre>[?&;](?:[A-Za-z0-9_.-]*(?:token|key|secret|password|passwd|pwd|auth|sig|signature)"
    r"[A-Za-z0-9_.-]*)=)[^&\s#\"'<>]+",
    re.IGNORECASE,
)
_AUTH_HEADER = re.compile(
    # On one line (a YAML mapping under `authorization:` is not a header), and not YAML's
    # null: `authorization: null` is a target without one (check config's summary).
    r"(?P<pre>\bauthorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:bearer|basic|token)?[ \t]*)"
    r"(?!null(?:[\s\"',}]|$))[^\s\"',}]+",
    re.IGNORECASE,
)


class MissingEnvVar(Exception):
    """A `${VAR}` reference names a variable that is not set."""

    def __init__(self, name: str) -> None:
        super().__init__(f"environment variable {name} is not set")
        self.name = name


def expand_env(text: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace each `${VAR}` with its value; `$$` stands for a literal `$`.

    Raises MissingEnvVar naming the first unset variable (never any value).
    """
    env = os.environ if environ is None else environ

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name is None:
            return "$"
        if name not in env:
            raise MissingEnvVar(name)
        return env[name]

    return _ENV_REF.sub(sub, text)


def env_refs(text: str) -> list[str]:
    """The variable names a string refers to with `${VAR}`."""
    return [m.group(1) for m in _ENV_REF.finditer(text) if m.group(1)]


def read_secret_file(path: str | Path) -> str:
    """The content of a secret file, surrounding whitespace (the trailing newline) stripped."""
    return Path(path).read_text(encoding="utf-8").strip()


def url_secret_parts(url: str) -> list[str]:
    """The parts of a URL that may be secret: the whole URL, password, path, query values."""
    parts = [url]
    try:
        split = urlsplit(url)
        password = split.password
    except ValueError:
        return parts
    if password:
        parts.append(password)
    if split.path not in ("", "/"):
        parts.append(split.path)
        # Token-like segments alone too (Slack's /services/T…/B…/XXXX), for
        # servers that echo just a piece of the path.
        parts.extend(seg for seg in split.path.split("/") if len(seg) >= TOKEN_SEGMENT_LEN)
    parts.extend(v for _, v in parse_qsl(split.query, keep_blank_values=False))
    return parts


class Redactor:
    """Replaces known secret strings and credential-looking URL parts with "<redacted>"."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        variants: set[str] = set()
        for s in secrets:
            if not s or len(s) < MIN_SECRET_LEN:
                continue
            # Also catch the secret where it was percent-encoded on the way out.
            variants.update({s, quote(s, safe=""), quote(s, safe="/:")})
        # Longest first so a secret that contains another is replaced whole.
        ordered = sorted(variants, key=len, reverse=True)
        self._known = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self.secrets: tuple[str, ...] = tuple(ordered)

    def redact(self, text: str) -> str:
        """`text` with every known secret and URL credential replaced."""
        if not text:
            return text
        if self._known is not None:
            text = self._known.sub(REDACTED, text)
        text = _URL_CREDENTIALS.sub(lambda m: m.group("pre") + REDACTED, text)
        text = _QUERY_SECRET.sub(lambda m: m.group("pre") + REDACTED, text)
        return _AUTH_HEADER.sub(lambda m: m.group("pre") + REDACTED, text)

    def __repr__(self) -> str:
        return f"Redactor({len(self.secrets)} secrets)"


class RedactingFilter(logging.Filter):
    """A logging filter that redacts the message, arguments and traceback of each record.

    Attach it to *handlers* (`install_redaction` does): a filter on a logger
    sees only records logged on that very logger, not those propagated from
    its children. `redactor` may be swapped on config reload.
    """

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record in place; never drops it."""
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not lose the record
            message = f"{record.msg!r} % {record.args!r}"
        record.msg = self.redactor.redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor.redact(record.stack_info)
        return True


def safe_url(url: str) -> str:
    """scheme://host:port plus "/<redacted>" when the URL has a path, query or credentials.

    Enough to recognise an endpoint in a log, never enough to use it.
    """
    try:
        split = urlsplit(url)
        host = f"{split.hostname}:{split.port}" if split.port else str(split.hostname)
    except ValueError:
        return REDACTED
    secret = split.path not in ("", "/") or split.query or split.username or split.fragment
    return f"{split.scheme}://{host}" + ("/" + REDACTED if secret else "")


class UrlArgsFilter(logging.Filter):
    """Replaces URL-object arguments of log records with `safe_url(...)`.

    httpx logs every request as `HTTP Request: POST <full url> ...` on the
    "httpx" logger, token and all. This filter, attached to that logger by
    `hide_http_client_urls()`, needs no list of secrets: any argument that is
    an httpx/`yarl`-style URL object is reduced to its scheme and host.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite URL arguments in place; never drops the record."""
        if isinstance(record.args, tuple):
            record.args = tuple(
                safe_url(str(a)) if type(a).__name__ == "URL" else a for a in record.args
            )
        return True


_URL_FILTER = UrlArgsFilter()


def hide_http_client_urls(logger_names: Iterable[str] = ("httpx",)) -> None:
    """Attach the UrlArgsFilter to the HTTP client loggers (idempotent)."""
    for name in logger_names:
        logger = logging.getLogger(name)
        if _URL_FILTER not in logger.filters:
            logger.addFilter(_URL_FILTER)


def install_redaction(redactor: Redactor, logger: logging.Logger | None = None) -> RedactingFilter:
    """Attach one RedactingFilter to every handler of `logger` (default: the root logger).

    Returns the filter so its `redactor` can be replaced after a reload.
    Handlers added later need `handler.addFilter(returned_filter)`.
    """
    target = logger or logging.getLogger()
    filt = RedactingFilter(redactor)
    for handler in target.handlers:
        handler.addFilter(filt)
    return filt
