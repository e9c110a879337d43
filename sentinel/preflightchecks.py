"""Pre-flight checks that read what `run` will read: TLS files, rule metric names, the network.

Split from `sentinel.preflight` (which calls these) to keep each module one screenful
of concerns. Each check loads a thing the way `run` loads it, so `check config`
cannot pass what `run` then trips on:

    tls files     every target's tls_config (CA bundle, client certificate and key)
                  loaded into an SSLContext, as the scraper loads it
    rule metrics  every `vllm:` name a rule selects is one vLLM exposes (did-you-mean)
    network       (`check config --network`) each model endpoint answers /v1/models
                  and each receiver's host accepts a connection, naming the URL;
                  through the proxy the environment gives (HTTP_PROXY, HTTPS_PROXY,
                  ALL_PROXY, NO_PROXY), chosen by httpx as the run-time clients
                  choose it: the model client and the receivers are httpx clients
                  that trust the environment (neither has a `proxy_url` key; only
                  targets do, and `--scrape` follows theirs)
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from sentinel.collect.tlssettings import TLSSettings, tls_problem
from sentinel.config import Config
from sentinel.config.load import format_path
from sentinel.findings import ERROR, UNAVAILABLE, WARNING, Finding

if TYPE_CHECKING:
    from sentinel.rules.loader import RuleGroup

NETWORK_TIMEOUT_S = 5.0


def check_tls_files(config: Config) -> list[Finding]:
    """Each target's TLS files, loaded as the scraper loads them (once per distinct set)."""

    out: list[Finding] = []
    seen: set[TLSSettings] = set()
    for i, t in enumerate(config.targets):
        c = t.tls_config
        if c is None:
            continue
        settings = TLSSettings(c.ca_file, c.cert_file, c.key_file, c.server_name,
                               c.insecure_skip_verify)
        if settings in seen:
            continue
        seen.add(settings)
        problem = tls_problem(settings)
        if problem is not None:
            key = format_path(("targets", i, "tls_config", problem.key))
            out.append(Finding(ERROR, key, f"{problem.path} {problem.message}"))
    return out


def check_rule_metrics(groups: list[RuleGroup], strict: bool) -> list[Finding]:
    """Every `vllm:` name a rule selects that vLLM does not expose, with a did-you-mean.

    A warning (an error with `strict`): vLLM adds metrics faster than Sentinel's list
    grows, but a misspelt name is a rule that can never fire.
    """
    from sentinel.rules.metriccheck import selected_names
    from sentinel.rules.vllmnames import did_you_mean, is_known

    out: list[Finding] = []
    for g in groups:
        for rule in g.rules:
            names = sorted({x for group in selected_names(rule.query) for x in group
                            if x.startswith("vllm:") and not is_known(x)})
            for name in names:
                guess = did_you_mean(name)
                fix = (f"did you mean {guess}?" if guess else "check the name against the "
                       "server's /metrics (`sentinel check config --scrape` scrapes it)")
                out.append(Finding(ERROR if strict else WARNING, "", (
                    f"rule {g.name}/{rule.name} selects {name}, which is not a metric vLLM "
                    f"exposes: {fix}"), _rule_where(g.file, rule.name)))
    return out


def _rule_where(path: str, rule: str) -> str:
    """`FILE:LINE` of `alert: NAME` / `record: NAME` in a rule file (FILE when not found)."""
    if not path:
        return ""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return path
    pattern = re.compile(r"^\s*-?\s*(alert|record)\s*:\s*['\"]?" + re.escape(rule) + r"['\"]?\s*$")
    line = next((i + 1 for i, text in enumerate(lines) if pattern.match(text)), None)
    return f"{path}:{line}" if line else path


def check_network(config: Config) -> list[Finding]:
    """Model endpoints answer /v1/models; each receiver's host takes a connection."""
    out = [f for i, e in enumerate(config.diagnosis.endpoints if config.diagnosis else ())
           if (f := _check_model(i, e)) is not None]
    for i, r in enumerate(config.receivers):
        for kind in ("webhook", "slack", "pagerduty", "alertmanager"):
            rc = getattr(r, kind)
            if rc is not None:
                f = _check_receiver(format_path(("receivers", i, kind, "url")), rc.url)
                if f is not None:
                    out.append(f)
    return out


def _check_model(i: int, endpoint: object) -> Finding | None:
    import httpx

    key = format_path(("diagnosis", "endpoints", i, "url"))
    url = str(getattr(endpoint, "url", "")).removesuffix("/v1") + "/v1/models"
    api_key = getattr(endpoint, "api_key", "")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    via = _through(url)
    try:  # httpx's own choice of proxy from the environment, as ModelClient's at run time
        reply = httpx.get(url, headers=headers, timeout=NETWORK_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return Finding(UNAVAILABLE, key, f"{url}{via}: no answer ({type(exc).__name__}: "
                       f"{_words(exc)}): start the model server there, or fix the URL"
                       f"{' or the proxy' if via else ''}; diagnosis asks it at the first "
                       "crash")
    if reply.status_code >= 400:
        return Finding(UNAVAILABLE, key, f"{url}{via}: HTTP {reply.status_code}: "
                       + ("check api_key / api_key_file" if reply.status_code in (401, 403)
                          else "the proxy could not reach it" if via and reply.status_code
                          in _PROXY_FAILED else
                          "is this an OpenAI-compatible server (vLLM serves /v1/models)?"))
    return None


_PROXY_FAILED = (502, 503, 504)  # what a forward proxy answers when the origin is away


def _check_receiver(key: str, url: str) -> Finding | None:
    """The receiver's host and port reached as a notification would reach it.

    Directly: a TCP connection, nothing sent (no test page). Through the proxy the
    environment gives for the URL (httpx's choice, as at run time): a HEAD of the
    origin's root through it (the path, a webhook's secret, is never sent), since a
    connection to the proxy alone says nothing of what lies behind it.
    """
    u = urlsplit(url)
    origin = f"{u.scheme}://{u.hostname}" + (f":{u.port}" if u.port else "")
    if _env_proxy(url) is not None:
        return _check_receiver_through_proxy(key, origin)
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        socket.create_connection((u.hostname or "", port), timeout=NETWORK_TIMEOUT_S).close()
    except OSError as exc:
        # Only the origin: webhook URLs carry their token in the path.
        return Finding(UNAVAILABLE, key, f"{origin}: cannot connect "
                       f"({exc.strerror or exc}): notifications to it would fail; check "
                       "the URL and that this host may reach it (firewall, proxy)")
    return None


def _check_receiver_through_proxy(key: str, origin: str) -> Finding | None:
    import httpx

    via = _through(origin)
    try:
        reply = httpx.head(origin + "/", timeout=NETWORK_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return Finding(UNAVAILABLE, key, f"{origin}{via}: cannot connect "
                       f"({type(exc).__name__}: {_words(exc)}): notifications to it would "
                       "fail; check the proxy (HTTP_PROXY, HTTPS_PROXY, NO_PROXY)")
    if reply.status_code in _PROXY_FAILED:
        return Finding(UNAVAILABLE, key, f"{origin}{via}: HTTP {reply.status_code}: the "
                       "proxy could not reach it; notifications to it would fail")
    return None


def _env_proxy(url: str) -> str | None:
    """The proxy httpx takes from the environment for `url` (None: direct, or NO_PROXY).

    httpx's own matching (its most specific pattern first), so the pre-flight goes
    the way the run-time clients go; an httpx without these helpers means "direct".
    """
    try:
        import httpx
        from httpx._utils import URLPattern, get_environment_proxies
    except ImportError:
        return None
    target = httpx.URL(url)
    for pattern, proxy in sorted(((URLPattern(k), v) for k, v in
                                  get_environment_proxies().items()), key=lambda kv: kv[0]):
        if pattern.matches(target):
            return proxy
    return None


def _through(url: str) -> str:
    """' (through the proxy ORIGIN)' when the environment proxies `url`, else ''.

    Only the proxy's origin: credentials in its URL are never shown.
    """
    proxy = _env_proxy(url)
    if proxy is None:
        return ""
    p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return f" (through the proxy {p.scheme}://{p.hostname}" + (f":{p.port})" if p.port
                                                               else ")")


def _words(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return getattr(cause, "strerror", None) or str(exc) or type(exc).__name__
