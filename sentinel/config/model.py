"""Sentinel's configuration models: pydantic classes that validate one config mapping.

Models forbid unknown keys and are frozen. Durations are Prometheus
durations in YAML and integer milliseconds in Python (`scrape_interval` →
`scrape_interval_ms`). Validators raise `PydanticCustomError("config", ...)`
with a key path below the model; `sentinel.config.load` turns those into
`file:line: key: message` problems. Import these through `sentinel.config`.
"""

from __future__ import annotations

import glob
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from sentinel.config.alert_restore import AlertRestoreConfig
from sentinel.config.api import ApiConfig
from sentinel.config.base import (
    Duration,
    PositiveDuration,
    Strict,
    http_url,
    problem,
)
from sentinel.config.database import DEFAULT_DATABASE, resolve_sqlite_path
from sentinel.config.diagnosis import DiagnosisConfig
from sentinel.config.durations import format_duration, parse_duration
from sentinel.config.evidence import EvidenceConfig
from sentinel.config.fleet import FleetConfig
from sentinel.config.ha import HAConfig
from sentinel.config.kubernetes import KubernetesSDConfig
from sentinel.config.notify import (
    DEFAULT_WEBHOOK_TIMEOUT_MS,
    NotifyConfig,
    ReceiverConfig,
    WebhookConfig,
    check_receiver_names,
)
from sentinel.config.probe import (
    DEFAULT_CANARY_CONCURRENCY,
    DEFAULT_PROBE_INTERVAL_MS,
    ProbeConfig,
)
from sentinel.config.querybackend import QueryBackendConfig
from sentinel.config.remediation import RemediationConfig, check_against_targets
from sentinel.config.scrapeclient import (
    AuthorizationConfig,
    BasicAuthConfig,
    ScrapeClientMixin,
    TLSConfig,
    inherit_client_keys,
)
from sentinel.config.sources import LogsConfig, TpuConfig
from sentinel.config.timeintervals import NamedTimeIntervalConfig
from sentinel.config.web import WebConfig

__all__ = [
    "DEFAULT_WEBHOOK_TIMEOUT_MS", "Config", "NotifyConfig", "ReceiverConfig", "TargetConfig",
    "WebhookConfig",
]

DEFAULT_LISTEN = "127.0.0.1:9465"
DEFAULT_INTERVAL_MS = 5_000
DEFAULT_TIMEOUT_MS = 4_000
DEFAULT_RETENTION_MS = 15 * 60_000

_NAME = r"^[a-zA-Z0-9_.-]+$"
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_GLOB_CHARS = re.compile(r"[*?\[]")


DEFAULT_SAMPLE_LIMIT = 50_000
DEFAULT_MAX_SERIES = 1_000_000


class TargetConfig(Strict, ScrapeClientMixin):
    """One vLLM server to scrape. Intervals are inherited from the global ones when unset."""

    name: str = Field(pattern=_NAME)
    url: str
    metrics_path: str = "/metrics"
    scrape_interval_ms: PositiveDuration = Field(alias="scrape_interval")
    scrape_timeout_ms: PositiveDuration = Field(alias="scrape_timeout")
    labels: dict[str, str] = Field(default_factory=dict)
    logs: LogsConfig = LogsConfig.model_validate({})
    tpu: TpuConfig | None = None
    xla_cache_path: str | None = None
    # What the server runs on, where nothing Sentinel can read tells (the container's
    # environment and devices usually do): auto, tpu or gpu. Sets the restart's cost model.
    accelerator: str = "auto"
    # Prometheus's per-scrape limits: more samples in a page, or more labels on one
    # series, fail this target's scrape (up 0) and no other's. 0: no limit.
    # sample_limit defaults to DEFAULT_SAMPLE_LIMIT: one runaway page must not crowd
    # out the fleet's scrapes (a vLLM page is ~2,000 samples).
    sample_limit: int = Field(DEFAULT_SAMPLE_LIMIT, ge=0)
    label_limit: int = Field(0, ge=0)
    # /health, /v1/models and a canary completion (sentinel.collect.probe); see config/probe.py.
    probe: ProbeConfig | None = None
    # How the page is reached (config/scrapeclient.py), in Prometheus's key names.
    authorization: AuthorizationConfig | None = None
    basic_auth: BasicAuthConfig | None = None
    tls_config: TLSConfig | None = None
    proxy_url: str | None = None

    @model_validator(mode="after")
    def _https_proxy(self) -> TargetConfig:
        self.check_client()
        if self.proxy_url is not None and self.url.startswith("https://"):
            raise problem("an https target through proxy_url (CONNECT) is not supported yet: "
                          "reach it directly or scrape it over http through the proxy",
                          "proxy_url")
        return self

    @field_validator("url")
    @classmethod
    def _check_url(cls, v: str) -> str:
        http_url(v, what="target URL")
        if urlsplit(v).query or urlsplit(v).fragment:
            raise problem("target URL must not have a query or fragment")
        return v

    @field_validator("metrics_path")
    @classmethod
    def _check_path(cls, v: str) -> str:
        if not v.startswith("/"):
            raise problem("must start with /")
        return v

    @field_validator("accelerator")
    @classmethod
    def _check_accelerator(cls, v: str) -> str:
        if v not in ("auto", "tpu", "gpu"):
            raise problem("must be auto, tpu or gpu")
        return v

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not _LABEL_NAME.match(name):
                raise problem("not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*)", name)
            if name.startswith("__"):
                raise problem("label names starting with __ are reserved", name)
        return v

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> TargetConfig:
        if self.scrape_timeout_ms > self.scrape_interval_ms:
            raise problem(timeout_message(self.scrape_timeout_ms, self.scrape_interval_ms),
                           "scrape_timeout")
        return self

    @property
    def metrics_url(self) -> str:
        """The URL to scrape: url + metrics_path."""
        return self.url.rstrip("/") + self.metrics_path


def timeout_message(timeout_ms: int, interval_ms: int) -> str:
    """The error for a scrape_timeout longer than its scrape_interval."""
    return (f"scrape_timeout ({format_duration(timeout_ms)}) must not exceed "
            f"scrape_interval ({format_duration(interval_ms)})")


class Config(Strict, ScrapeClientMixin):
    """The whole configuration. Build with `load_config`, `parse_config` or `Config.default()`."""

    database: str = Field(DEFAULT_DATABASE, repr=False)  # may hold a password
    listen: str = DEFAULT_LISTEN
    external_url: str = ""
    # Alerting rule files (globs, relative to the config file). Unset: the rules Sentinel
    # ships (`bundled_rule_glob`); [] loads none, on purpose.
    rule_files: tuple[str, ...] | None = None
    evaluation_interval_ms: PositiveDuration = Field(
        DEFAULT_INTERVAL_MS, alias="evaluation_interval")
    # PromQL as Prometheus 3 evaluates it (left-open range windows, its arithmetic), or 2
    # for Prometheus 2.x's (closed windows; what the Debian promtool 2.42 computes).
    promql_semantics: Literal[2, 3] = 3
    # Experimental PromQL the rule files and queries may use, by Prometheus's feature flag
    # names: promql-experimental-functions, promql-duration-expr,
    # promql-binop-fill-modifiers, promql-extended-range-selectors.
    promql_features: tuple[Literal["promql-experimental-functions", "promql-duration-expr",
                                   "promql-binop-fill-modifiers",
                                   "promql-extended-range-selectors"], ...] = ()
    scrape_interval_ms: PositiveDuration = Field(DEFAULT_INTERVAL_MS, alias="scrape_interval")
    scrape_timeout_ms: PositiveDuration = Field(DEFAULT_TIMEOUT_MS, alias="scrape_timeout")
    retention_ms: PositiveDuration = Field(DEFAULT_RETENTION_MS, alias="retention")
    # Store every scraped series, not only those the loaded rules read.
    keep_all_series: bool = False
    # Series the embedded store holds at most, all targets together; a scrape that
    # would add one past it fails ("store full", up stays as it was for that page).
    max_series: int = Field(DEFAULT_MAX_SERIES, ge=1)
    # Processes that fetch, parse and filter the scrapes (sentinel/collect/workerpool.py):
    # 1 scrapes inside the daemon's process; `auto` is one per core from 450 scrapes a
    # second of the static targets on (2,250 targets at 5 s), else 1 (one process is
    # cheaper below that). Needs a restart to change.
    collect_workers: int | Literal["auto"] = "auto"
    targets: tuple[TargetConfig, ...] = ()
    # Targets found in the Kubernetes API and kept in sync (sentinel/collect/kubernetes_sd.py).
    kubernetes_sd: tuple[KubernetesSDConfig, ...] = ()
    receivers: tuple[ReceiverConfig, ...] = ()
    # Crash signatures for log sources; default: the bundled rules/signatures.yaml.
    signatures: str | None = None
    # Runbooks from a self-hosted model (sentinel/respond/diagnose); off when absent.
    diagnosis: DiagnosisConfig | None = None
    notify: NotifyConfig = NotifyConfig.model_validate({})
    remediation: RemediationConfig = RemediationConfig.model_validate({})
    # One alert on many targets at once is one fleet incident and one page (issue 49).
    fleet: FleetConfig = FleetConfig.model_validate({})
    # Probes of every target's serving path; 0 turns them off (sentinel.config.probe).
    probe_interval_ms: Duration = Field(DEFAULT_PROBE_INTERVAL_MS, alias="probe_interval")
    probe_canary_concurrency: int = Field(DEFAULT_CANARY_CONCURRENCY, ge=1)
    api: ApiConfig = ApiConfig.model_validate({})
    # Links out from the incident page: Grafana, the Prometheus graph (sentinel.config.web).
    web: WebConfig = WebConfig.model_validate({})
    # How a restart restores alerts' `for` state (Prometheus's flags; issue 10).
    alert_restore: AlertRestoreConfig = AlertRestoreConfig.model_validate({})
    # Rules query a Prometheus-compatible API instead of the embedded store (issue 16).
    query_backend: QueryBackendConfig | None = None
    # A leader lease on the shared PostgreSQL (sentinel.config.ha); absent: act alone.
    ha: HAConfig | None = None
    # Recurring windows in Alertmanager's syntax, named for remediation silences (and
    # routes) to use (sentinel.config.timeintervals).
    time_intervals: tuple[NamedTimeIntervalConfig, ...] = ()
    # Scrape defaults every target inherits (its own keys win; auth goes as a pair):
    # config/scrapeclient.py, in Prometheus's key names.
    authorization: AuthorizationConfig | None = None
    basic_auth: BasicAuthConfig | None = None
    tls_config: TLSConfig | None = None
    proxy_url: str | None = None
    # Which window of an incident's series is stored with it, so its plot outlives the store.
    evidence: EvidenceConfig = EvidenceConfig.model_validate({})

    _config_dir: Path = PrivateAttr(default_factory=Path.cwd)

    def model_post_init(self, context: Any) -> None:
        """Remember the folder relative paths are resolved against (from the validation context)."""
        if isinstance(context, Mapping) and context.get("config_dir") is not None:
            self._config_dir = Path(context["config_dir"])

    @property
    def config_dir(self) -> Path:
        """The config file's folder: rule_files and url_file paths are relative to it."""
        return self._config_dir

    @classmethod
    def default(cls) -> Config:
        """The built-in defaults: no targets, no receivers, SQLite in the working directory."""
        return cls.model_validate(inherit_defaults({}), context={"config_dir": Path.cwd()})

    @model_validator(mode="before")
    @classmethod
    def _fill_inherited(cls, data: Any) -> Any:
        return inherit_defaults(data) if isinstance(data, dict) else data

    @field_validator("database")
    @classmethod
    def _check_database(cls, v: str, info: ValidationInfo) -> str:
        try:
            driver = make_url(v).drivername
        except (ArgumentError, ValueError):
            raise problem("not a valid database URL (sqlite:///file.db, postgresql://…)") from None
        if driver.split("+")[0] not in ("sqlite", "postgresql"):
            raise problem(f"unsupported database {driver!r} (use sqlite or postgresql)")
        # Only a value written in the file: the default stays in the working directory
        # (systemd's StateDirectory, the image's volume), where the config's folder is
        # often read-only (/etc/sentinel, a ConfigMap).
        return resolve_sqlite_path(v, (info.context or {}).get("config_dir"))

    @field_validator("collect_workers")
    @classmethod
    def _check_collect_workers(cls, v: int | str) -> int | str:
        if isinstance(v, int) and not 1 <= v <= 256:
            raise problem("must be `auto` or a number of processes from 1 to 256")
        return v

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, v: str) -> str:
        if split_listen(v) is None:
            raise problem("expected host:port, e.g. 127.0.0.1:9465")
        return v

    @field_validator("external_url")
    @classmethod
    def _check_external_url(cls, v: str) -> str:
        return http_url(v, what="external URL").rstrip("/")

    @field_validator("rule_files")
    @classmethod
    def _check_rule_files(cls, v: tuple[str, ...] | None, info: ValidationInfo
                          ) -> tuple[str, ...] | None:
        # A pattern that matches no rule file is a daemon that can never alert (issue 36):
        # refused here, so `run`, `check config` and a reload all say so.
        base = Path((info.context or {}).get("config_dir", "."))
        for i, pattern in enumerate(v or ()):
            if not _matching_rule_files(pattern, base):
                raise problem(_no_rule_file_message(pattern, base), i)
        return v

    @field_validator("targets", "receivers", "kubernetes_sd", "time_intervals")
    @classmethod
    def _unique_names(cls, v: tuple[Any, ...], info: ValidationInfo) -> tuple[Any, ...]:
        seen: dict[str, int] = {}
        for i, item in enumerate(v):
            if item.name in seen:
                raise problem(duplicate_message(item.name, str(info.field_name),
                                                  seen[item.name]), i, "name")
            seen[item.name] = i
        return v

    @model_validator(mode="after")
    def _notify_receivers(self) -> Config:
        check_receiver_names(self.notify, self.receivers)
        return self

    @model_validator(mode="after")
    def _global_timeout(self) -> Config:
        if self.scrape_timeout_ms > self.scrape_interval_ms:
            raise problem(timeout_message(self.scrape_timeout_ms, self.scrape_interval_ms),
                           "scrape_timeout")
        check_against_targets(self.remediation, {t.name: t for t in self.targets})
        return self

    @model_validator(mode="after")
    def _client_defaults(self) -> Config:
        self.check_client()
        return self

    @model_validator(mode="after")
    def _known_time_intervals(self) -> Config:
        names = {n.name for n in self.time_intervals}
        route = self.notify.route
        if route is not None:
            if route.mute_time_intervals or route.active_time_intervals:
                raise problem("the root route cannot have mute or active time intervals (as "
                              "in Alertmanager): put them on a child route",
                              "notify", "route", "mute_time_intervals")
            for name, where in route.time_interval_names():
                if name not in names:
                    raise problem(f"no time interval named {name!r} (time_intervals: "
                                  f"{', '.join(sorted(names)) or 'none'})",
                                  "notify", "route", *where)
        for i, silence in enumerate(self.remediation.silences):
            for j, name in enumerate(silence.time_intervals):
                if name not in names:
                    raise problem(f"no time interval named {name!r} (time_intervals: "
                                  f"{', '.join(sorted(names)) or 'none'})",
                                  "remediation", "silences", i, "time_intervals", j)
        return self

    @model_validator(mode="after")
    def _known_endpoint_targets(self) -> Config:
        names = {t.name for t in self.targets}
        for i, e in enumerate(self.diagnosis.endpoints if self.diagnosis else ()):
            if e.target is not None and e.target not in names:
                raise problem(f"no target named {e.target!r} (targets: "
                              f"{', '.join(sorted(names)) or 'none'})",
                              "diagnosis", "endpoints", i, "target")
        return self

    def rule_paths(self) -> list[Path]:
        """The rule files the globs match now, sorted, relative globs under `config_dir`.

        Without `rule_files`, the bundled rules. Unit tests (`*_test.yaml`) and crash
        signatures (`signatures.yaml`) kept beside the rules are not rule files.
        """
        patterns = self.rule_files if self.rule_files is not None else (bundled_rule_glob(),)
        out: set[Path] = set()
        for pattern in patterns:
            out.update(_matching_rule_files(pattern, self.config_dir))
        return sorted(out)

    def receiver(self, name: str) -> ReceiverConfig | None:
        """The receiver named `name`, if any."""
        return next((r for r in self.receivers if r.name == name), None)

    def secrets(self) -> list[str]:
        """Every secret-bearing resolved value, for the Redactor."""
        out: list[str] = []
        password = _database_password(self.database)
        if password:
            out += [self.database, password]
        for r in self.receivers:
            out += r.secrets()
        if self.diagnosis is not None:
            out += self.diagnosis.secrets()
        out += [t.probe.api_key for t in self.targets if t.probe is not None and t.probe.api_key]
        out += [v for t in self.targets for v in t.client_secrets()] + self.client_secrets()
        out += self.api.secrets()
        return out


def bundled_rule_glob() -> str:
    """The rules Sentinel ships, as a glob: rules/ in a checkout, sentinel/_bundled/ in a wheel."""
    from sentinel.paths import bundled_dir

    return str(bundled_dir("rules") / "*.yaml")


def _matching_rule_files(pattern: str, base: Path) -> list[Path]:
    full = pattern if Path(pattern).is_absolute() else str(base / pattern)
    return [Path(p) for p in glob.glob(full) if is_rule_file(Path(p))]


def is_rule_file(path: Path) -> bool:
    """False for the files kept beside rules that are not rules: unit tests, signatures."""
    return not path.stem.endswith("_test") and path.stem != "signatures"


def _no_rule_file_message(pattern: str, base: Path) -> str:
    what = "matches no rule file" if _GLOB_CHARS.search(pattern) else "rule file not found"
    where = "" if Path(pattern).is_absolute() else f" in {base}"
    return (f"{what}: {pattern!r}{where} (relative to the config file's folder); omit "
            "rule_files to load the bundled rules, or write rule_files: [] for none")


def _database_password(url: str) -> str | None:
    try:
        return make_url(url).password  # type: ignore[return-value]
    except (ArgumentError, ValueError):
        return None


def split_listen(listen: str) -> tuple[str, int] | None:
    """`host:port` as (host, port), or None when it is not one."""
    host, sep, port = str(listen).rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        return None
    return host.strip("[]"), int(port)


def try_duration(value: Any, fallback: int) -> int:
    """`value` as a duration in ms, or `fallback` when it is not a valid one."""
    try:
        return parse_duration(str(value)) if isinstance(value, str | int) else fallback
    except ValueError:
        return fallback


def inherit_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """Fill what is derived from other keys: external_url, scrape_timeout, per-target intervals.

    As in Prometheus, an unset scrape_timeout is the global one capped at the
    interval. A malformed global value falls back to the built-in default here,
    so its error is reported once, at the global key, not again per target.
    """
    data = dict(data)
    interval = try_duration(data.get("scrape_interval"), DEFAULT_INTERVAL_MS)
    timeout = try_duration(data.get("scrape_timeout"), DEFAULT_TIMEOUT_MS)
    if "scrape_timeout" not in data:
        timeout = min(timeout, interval)
        data["scrape_timeout"] = format_duration(timeout)
    if "external_url" not in data:
        hp = split_listen(data.get("listen", DEFAULT_LISTEN))
        if hp is not None:
            host = hp[0] if hp[0] not in ("", "0.0.0.0", "::") else socket.gethostname()
            host = f"[{host}]" if ":" in host else host
            data["external_url"] = f"http://{host}:{hp[1]}"
    targets = data.get("targets")
    if isinstance(targets, list):
        data["targets"] = [_inherit_target(inherit_client_keys(t, data) if isinstance(t, dict)
                                           else t, interval, timeout) for t in targets]
    return data


def _inherit_target(t: Any, interval: int, timeout: int) -> Any:
    if not isinstance(t, dict):
        return t
    t = dict(t)
    own = try_duration(t.get("scrape_interval"), interval)
    t.setdefault("scrape_interval", format_duration(interval))
    t.setdefault("scrape_timeout", format_duration(min(timeout, own)))
    return t


def duplicate_message(name: str, section: str, first: int) -> str:
    """The error for a target or receiver name used twice."""
    return f"duplicate name {name!r} (also {section}[{first}])"
