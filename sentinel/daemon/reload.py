"""Reloading the whole configuration (SIGHUP, `POST /-/reload`), all or nothing.

A reload reads the file again, validates it completely and runs the
pre-flight's checks (`sentinel.preflight.preflight_reload`) without touching
anything; only a file that `run` would start with is applied. Keys the running
daemon cannot change in place (the database it holds, the address it listens
on, HA, ...) refuse the whole reload with a message naming each key: the file
is then neither half-applied nor silently ignored. The App applies a good file
part by part (`ReloadParts.apply`), keeping the state of what did not change.

`sentinel_config_last_reload_successful` and
`sentinel_config_last_reload_success_timestamp_seconds` say how the last one
went, as Prometheus's and Alertmanager's own metrics do.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge

from sentinel.config import Config, ConfigError, TargetConfig
from sentinel.config.errors import load_error_lines

log = logging.getLogger(__name__)

# Config keys a running daemon holds and cannot swap: a change needs a restart.
# Everything else (targets with their probes and logs, receivers, notify routes and
# inhibitions, remediation policies, rule files, signatures, api.tokens) is applied in place.
RESTART_KEYS: tuple[str, ...] = (
    "database", "listen", "ha", "query_backend", "kubernetes_sd", "diagnosis",
    "external_url", "evaluation_interval_ms", "promql_semantics", "promql_features",
    "retention_ms", "keep_all_series",
    "max_series", "alert_restore", "probe_interval_ms", "probe_canary_concurrency",
    "collect_workers",
)
# Target keys read by the log, TPU and XLA-cache sources: a change rebuilds those sources.
SOURCE_KEYS: tuple[str, ...] = ("logs", "tpu", "xla_cache_path")
_NO_SOURCES = (TargetConfig.model_fields["logs"].default, None, None)


class ReloadRefused(Exception):
    """The new file is not applied; str() says why, one line a problem (file, line, key)."""


@dataclass(frozen=True, slots=True)
class ReloadResult:
    """How one reload went: `ok`, and a message for the log and `POST /-/reload`."""

    ok: bool
    message: str

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True, slots=True)
class TargetDiff:
    """The static targets a reload removes, adds and changes (by name)."""

    removed: tuple[str, ...]
    added: tuple[TargetConfig, ...]
    changed: tuple[TargetConfig, ...]

    def __bool__(self) -> bool:
        return bool(self.removed or self.added or self.changed)


def diff_targets(old: Sequence[TargetConfig], new: Sequence[TargetConfig]) -> TargetDiff:
    """Which targets went, came and changed; unchanged ones keep their jobs and state."""
    before = {t.name: t for t in old}
    after = {t.name: t for t in new}
    return TargetDiff(
        removed=tuple(n for n in before if n not in after),
        added=tuple(t for n, t in after.items() if n not in before),
        changed=tuple(t for n, t in after.items() if n in before and before[n] != t))


def sources_changed(old: Config, new: Config) -> bool:
    """Whether the log, TPU or XLA-cache sources (or the crash signatures) differ.

    Targets without any source do not count: adding or removing one must not re-open
    every log file the others follow.
    """
    return _sources(old) != _sources(new) or old.signatures != new.signatures


def _sources(config: Config) -> dict[str, tuple[object, ...]]:
    """Each target's source settings, for the targets that have any."""
    out = {}
    for t in config.targets:
        settings = tuple(getattr(t, k) for k in SOURCE_KEYS)
        if settings != _NO_SOURCES:
            out[t.name] = settings
    return out


def restart_needed(old: Config, new: Config) -> list[str]:
    """One line per changed key the running daemon cannot take without a restart."""
    out = [f"{_key(k)}: changed; a restart is needed to apply it"
           for k in RESTART_KEYS if getattr(old, k) != getattr(new, k)]
    # Tokens are swapped in place (Auth.replace_tokens); the Host check is built at start.
    if old.api.allowed_hosts != new.api.allowed_hosts:
        out.append("api.allowed_hosts: changed; a restart is needed to apply it")
    # The rest of `fleet:` is applied in place; its open incidents are keyed by group_by.
    if old.fleet.enabled and old.fleet.group_by != new.fleet.group_by:
        out.append("fleet.group_by: changed; a restart is needed to apply it (the open "
                   "fleet incidents are grouped by it)")
    return out


def _key(field: str) -> str:
    """The YAML key of a Config field (`evaluation_interval_ms` → `evaluation_interval`)."""
    alias = Config.model_fields[field].alias
    return alias or field


def validate(config: Config, source: str | None) -> list[str]:
    """Raise ReloadRefused with the lines `run` would refuse this config with; else the
    warnings `run` would log (a log file that does not exist yet)."""
    from sentinel.preflight import WARNING, finding_lines, preflight_reload

    pf = preflight_reload(config, source)
    if pf.refused:
        raise ReloadRefused("\n".join(finding_lines(pf.refused)))
    return finding_lines([f for f in pf.findings if f.kind == WARNING])


def load_checked(load: Callable[[], Config], source: str | None, running: Config
                 ) -> tuple[Config, list[str]]:
    """The new config and its warnings, loaded and checked without side effects;
    ReloadRefused says why not."""
    try:
        new = load()
    except (ConfigError, OSError) as exc:
        raise ReloadRefused("\n".join(load_error_lines(exc, source or "<config>"))) from None
    warnings = validate(new, source)
    restart = restart_needed(running, new)
    if restart:
        where = f"{source}: " if source else ""
        raise ReloadRefused("\n".join(f"error: {where}{line}" for line in restart))
    return new, warnings


class ReloadMetrics:
    """`sentinel_config_last_reload_successful` and `…_success_timestamp_seconds`."""

    def __init__(self, registry: CollectorRegistry, now_s: float) -> None:
        self.successful = Gauge(
            "sentinel_config_last_reload_successful",
            "Whether the last configuration reload attempt was successful (1) or not (0).",
            registry=registry)
        self.success_time = Gauge(
            "sentinel_config_last_reload_success_timestamp_seconds",
            "Timestamp of the last successful configuration reload (or of the start).",
            registry=registry)
        self.succeeded(now_s)  # the file read at start counts, as in Prometheus

    def succeeded(self, now_s: float) -> None:
        """A reload applied (or the start)."""
        self.successful.set(1)
        self.success_time.set(now_s)

    def failed(self) -> None:
        """A reload refused: the running config stays."""
        self.successful.set(0)


class Reloader:
    """One reload at a time: load and check the file aside, then hand it to `apply`.

    `apply(new)` swaps the daemon's parts; it runs only for a file that passed
    every check. SIGHUP (the main thread) and `POST /-/reload` (an API worker)
    may ask at once: the second waits for the first.
    """

    def __init__(self, load: Callable[[], Config], source: str | None,
                 running: Callable[[], Config], apply: Callable[[Config], None],
                 metrics: ReloadMetrics, clock: Callable[[], float] = time.time) -> None:
        self._load = load
        self._source = source
        self._running = running
        self._apply = apply
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.Lock()

    def reload(self) -> ReloadResult:
        """Reload once; never raises. The log line says what happened, and why not."""
        with self._lock:
            try:
                new, warnings = load_checked(self._load, self._source, self._running())
            except ReloadRefused as exc:
                return self._refused("reload refused, keeping the running configuration",
                                     str(exc).splitlines())
            for warning in warnings:  # as `run` says them at start
                log.warning("reload: %s", warning.removeprefix("warning: "))
            try:
                self._apply(new)
            except Exception as exc:  # a bug, or a part that could not start: say so loudly
                log.exception("reload failed while applying")
                return self._refused("reload failed while applying; parts of the new "
                                     "configuration may be in effect: fix and reload again, "
                                     "or restart", [str(exc)])
            self._metrics.succeeded(self._clock())
            where = f" from {self._source}" if self._source else ""
            message = f"configuration reloaded{where}"
            log.info("%s", message)
            return ReloadResult(True, message)

    def _refused(self, why: str, problems: list[str]) -> ReloadResult:
        """Metric 0, one log line per problem (file, line, key), the whole in the result."""
        self._metrics.failed()
        problems = [p.removeprefix("error: ") for p in problems] or ["(no detail)"]
        for problem in problems:
            log.error("%s: %s", why, problem)
        return ReloadResult(False, "\n".join([f"{why}:", *problems]))
