"""Credentials recognised by their shape, for text that leaves Sentinel or is stored.

`sentinel.secrets.Redactor` knows the secrets of Sentinel's own config. Crash
logs carry other people's: a Hugging Face token in a download error, a bearer
token in a logged request, a Google API key or a whole service-account JSON
in an environment dump, a password in a database URL, a Slack webhook. These
are found by shape and replaced before a log excerpt is stored or put into a
prompt for a model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sentinel.secrets import REDACTED, Redactor

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # A PEM private key (a service-account JSON carries one with "\n" escapes).
    ("private key", re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
        re.DOTALL)),
    # Service-account JSON fields that identify the key.
    ("service account field", re.compile(
        r'(?P<pre>"(?:private_key_id|private_key|client_secret|refresh_token)"\s*:\s*")'
        r'[^"]*')),
    ("hugging face token", re.compile(r"\bhf_[A-Za-z0-9]{20,}")),
    ("google api key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("google oauth token", re.compile(r"\bya29\.[0-9A-Za-z_.-]{20,}")),
    ("github token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}")),
    ("aws access key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("slack token", re.compile(r"\bxox[abposr]-[0-9A-Za-z-]{10,}")),
    ("bearer token", re.compile(r"(?P<pre>\b[Bb]earer\s+)[A-Za-z0-9._~+/=-]{8,}")),
    # Webhook URLs are credentials in full: the path is the secret.
    ("webhook url", re.compile(
        r"https?://(?:hooks\.slack\.com/|[a-z0-9.-]*discord(?:app)?\.com/api/webhooks/|"
        r"outlook\.office(?:365)?\.com/webhook|[a-z0-9.-]*webhook\.office\.com/|"
        r"chat\.googleapis\.com/|events\.pagerduty\.com/integration/)[^\s\"'<>]*")),
    # key=value and "key": "value" pairs named like credentials.
    ("credential assignment", re.compile(
        r"(?P<pre>\b[A-Za-z0-9_.-]*(?:password|passwd|secret|token|api[_-]?key|access[_-]?key)"
        r"[A-Za-z0-9_.-]*[\"']?\s*[:=]\s*[\"']?)(?!<redacted>)[^\s\"',;&}]{4,}",
        re.IGNORECASE)),
)


def redact_credentials(text: str) -> str:
    """`text` with every credential-shaped part replaced by "<redacted>"."""
    if not text:
        return text
    for _name, pattern in _PATTERNS:
        text = pattern.sub(_replacement, text)
    return text


def _replacement(m: re.Match[str]) -> str:
    pre = m.groupdict().get("pre")
    return (pre or "") + REDACTED


class PromptRedactor:
    """Config secrets (a `Redactor`) plus credential shapes, for prompts and stored evidence."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._known = Redactor(secrets)

    def redact(self, text: str) -> str:
        """Known secrets first (exact), then URL credentials and credential shapes."""
        return redact_credentials(self._known.redact(text))

    def lines(self, lines: Iterable[str]) -> tuple[str, ...]:
        """Each line redacted; a private key spread over lines is cut from BEGIN to END."""
        out: list[str] = []
        in_key = False
        for line in lines:
            if in_key:
                if "PRIVATE KEY-----" in line and "-----END" in line:
                    in_key = False
                out.append(REDACTED)
                continue
            redacted = self.redact(line)
            if "-----BEGIN" in line and "PRIVATE KEY-----" in line and "-----END" not in line:
                in_key = True
            out.append(redacted)
        return tuple(out)
