"""Credentials recognised by their shape, for text that leaves Sentinel or is stored.

`sentinel.secrets.Redactor` knows the secrets of Sentinel's own config. Crash
logs carry other people's: a Hugging Face token in a download error, a bearer
token in a logged request, a Google API key or a whole service-account JSON
in an environment dump, a password in a database URL, a Slack webhook. These
are found by shape and replaced before a log excerpt is stored or put into a
prompt for a model.

Three layers, all by shape, none by host name:

- fixed shapes: PEM keys, service-account fields, vendor token prefixes
  (`hf_`, `AIza`, `ghp_`, `sk-`, `glpat-`, `xox*-`, AWS key ids, JWTs) and
  `Bearer ...`;
- URLs of any host (`redact_urls`): the password of `user:pass@`, a
  token-like user (`https://<token>@host`), token-like path segments, every
  segment after a segment such as `hooks`, `webhook` or `token`, and query or
  fragment values that are token-like or named like credentials;
- words such as password, secret, token, key beside `=` or `:` (and token,
  secret, password, api key beside a blank): the value is replaced when it
  looks like one (passwords: anything but None/null/true/false; tokens and
  keys: high entropy), so `max_tokens=512` or `tokenizer=google/gemma-...`
  stay as they are.

"Token-like" (`token_like`) is a run of at least 16 letters and digits that
mixes both (or has letter entropy of 4 bits or more), and is not all
hexadecimal: request ids, commit SHAs and content hashes are kept, model
names and paths made of short words are kept. What this misses, plainly: a
hex-only or digits-only token in a URL path that no `hooks`/`token`-like
segment precedes; a token shorter than 16 characters not beside a keyword;
a secret in free prose without a keyword; a secret split across lines
(except PEM keys). Each regex here is linear on hostile text: quantifiers
that could backtrack over a long run are possessive or bounded.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable

from sentinel.secrets import REDACTED, Redactor

# The shortest run of letters and digits taken as a token on its own.
TOKEN_MIN_LEN = 16
# Bits per character over letters alone that make a digit-free run a token
# (random mixed-case base62 of 16+ characters is about 4.0; English words
# and CamelCase identifiers stay near or below 3.5).
TOKEN_MIN_ENTROPY = 4.0

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
    ("gitlab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("openai-style key", re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}")),
    ("stripe-style key", re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("npm token", re.compile(r"\bnpm_[A-Za-z0-9]{36}")),
    ("json web token", re.compile(
        r"\beyJ[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+")),
    ("aws access key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("slack token", re.compile(r"\bxox[abposr]-[0-9A-Za-z-]{10,}")),
    ("bearer token", re.compile(r"(?P<pre>\b[Bb]earer\s+)[A-Za-z0-9._~+/=-]{8,}")),
    # Webhook URLs are credentials in full: the path is the secret.
    ("webhook url", re.compile(
        r"https?://(?:hooks\.slack\.com/|[a-z0-9.-]*discord(?:app)?\.com/api/webhooks/|"
        r"outlook\.office(?:365)?\.com/webhook|[a-z0-9.-]*webhook\.office\.com/|"
        r"chat\.googleapis\.com/|events\.pagerduty\.com/integration/)[^\s\"'<>]*")),
)

# `name = value` / `"name": "value"` where the name ends in a credential word.
# The name's prefix is bounded (up to four `word_` parts) so a long run of
# name characters costs a bounded amount per position.
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9])(?P<pre>(?:[A-Za-z0-9]{1,40}[_.-]){0,4}"
    r"(?P<word>password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|auth|credentials?|key|sig|signature)"
    r"[\"']?+[ \t]*+[:=][ \t]*+[\"']?+)(?P<value>[^\s\"',;&}<>]++)",
    re.IGNORECASE)
# `token <value>`, `api key is <value>`: a blank instead of `=`; the value must look like a token.
_BESIDE = re.compile(
    r"(?<![A-Za-z0-9_])(?P<pre>(?:token|secret|password|api[ _-]?key|apikey)[ \t]++"
    r"(?:is[ \t]++)?)(?P<value>[A-Za-z0-9_\-./+=~]{16,}+)",
    re.IGNORECASE)
_NOT_SECRETS = frozenset({"none", "null", "nil", "true", "false", "empty", "redacted", "***",
                          "<redacted>", "xxx", "changeme"})
_PASSWORD_WORDS = ("password", "passwd", "pwd", "secret", "credential", "credentials")

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{0,30}+://[^\s\"'<>`]++")
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]++")
_HEX = re.compile(r"[0-9a-fA-F]++")
# A path segment after one of these names holds the credential, as do all that follow.
_HOOK_SEGMENTS = frozenset({"hook", "hooks", "webhook", "webhooks", "token", "tokens", "secret",
                            "secrets", "key", "keys", "apikey", "apikeys", "api_key", "api-key"})
_QUERY_NAME = re.compile(
    r"(?:token|key|secret|password|passwd|pwd|auth|sig|signature|credential|code|session)",
    re.IGNORECASE)


def token_like(text: str) -> bool:
    """Whether `text` holds a run that reads as a generated token rather than a name or an id."""
    if len(text) < TOKEN_MIN_LEN:
        return False
    for run in _ALNUM_RUN.findall(text):
        if len(run) < TOKEN_MIN_LEN or _HEX.fullmatch(run):
            continue
        has_digit = any(c.isdigit() for c in run)
        if has_digit and not run.isdigit():
            return True
        if not has_digit and _entropy(run) >= TOKEN_MIN_ENTROPY:
            return True
    return False


def _entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def _secret_value(word: str, value: str) -> bool:
    """Whether the value beside a credential word is worth hiding."""
    bare = value.strip("\"'")
    if bare.lower() in _NOT_SECRETS or bare.startswith(("${", "$(")):
        return False
    if word.lower().startswith(_PASSWORD_WORDS):
        return len(bare) >= 3  # passwords may be short and plain
    if len(bare) < 12 or _is_number(bare):  # `key=layers.0`, `max_len=8192`
        return False
    letters = sum(c.isalpha() for c in bare)
    digits = sum(c.isdigit() for c in bare)
    return token_like(bare) or (letters > 0 and digits > 0) or _entropy(bare) >= 3.5


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _assignment(m: re.Match[str]) -> str:
    if _secret_value(m.group("word"), m.group("value")):
        return m.group("pre") + REDACTED
    return m.group(0)


def _beside(m: re.Match[str]) -> str:
    return m.group("pre") + REDACTED if token_like(m.group("value")) else m.group(0)


def redact_urls(text: str) -> str:
    """Every URL in `text` with its credential-looking parts replaced, whatever the host."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: _redact_url(m.group(0)), text)


def _redact_url(url: str) -> str:
    scheme, _, rest = url.partition("://")
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0),
              default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if "@" in authority:
        user, _, host = authority.rpartition("@")
        name, colon, _password = user.partition(":")
        if colon:
            user = f"{name}:{REDACTED}"
        elif token_like(user):
            user = REDACTED
        authority = f"{user}@{host}"
    path, hash_, fragment = tail.partition("#")
    path, question, query = path.partition("?")
    return (f"{scheme}://{authority}{_redact_path(path)}{question}{_redact_query(query)}"
            f"{hash_}{_redact_query(fragment)}")


def _redact_path(path: str) -> str:
    out: list[str] = []
    after_hook = False
    for seg in path.split("/"):
        if seg and seg != REDACTED and (after_hook or token_like(seg)):
            out.append(REDACTED)
        else:
            out.append(seg)
        after_hook = after_hook or seg.lower() in _HOOK_SEGMENTS
    return "/".join(out)


def _redact_query(query: str) -> str:
    if not query:
        return query
    out: list[str] = []
    for part in query.split("&"):
        name, eq, value = part.partition("=")
        if eq and value and value != REDACTED and (_QUERY_NAME.search(name) or token_like(value)):
            part = f"{name}={REDACTED}"
        elif not eq and token_like(part):
            part = REDACTED
        out.append(part)
    return "&".join(out)


def redact_credentials(text: str) -> str:
    """`text` with every credential-shaped part replaced by "<redacted>"."""
    if not text:
        return text
    for _name, pattern in _PATTERNS:
        text = pattern.sub(_replacement, text)
    text = redact_urls(text)
    text = _ASSIGNMENT.sub(_assignment, text)
    return _BESIDE.sub(_beside, text)


def _replacement(m: re.Match[str]) -> str:
    pre = m.groupdict().get("pre")
    return (pre or "") + REDACTED


class PromptRedactor(Redactor):
    """Config secrets plus credential shapes: for prompts, stored evidence and the daemon's log.

    A `Redactor`, so `install_redaction` takes it for the log handlers too.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__(secrets)

    def redact(self, text: str) -> str:
        """Known secrets first (exact), then URL credentials and credential shapes."""
        return redact_credentials(super().redact(text))

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
