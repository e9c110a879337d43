"""Build the log, TPU and XLA-cache sources a config names, one set per target."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sentinel.collect.cloud_logging import CloudLoggingSource, default_filter, make_client
from sentinel.collect.dockerapi_logs import DockerApiLogSource
from sentinel.collect.logcommand import journal_logs
from sentinel.collect.logfile import LogFileSource
from sentinel.collect.logsource import LogSource
from sentinel.collect.tpu import TpuNodeSource, make_tpu_client
from sentinel.config import Config, TargetConfig
from sentinel.config.sources import DEFAULT_XLA_CACHE_POLL_MS
from sentinel.incidents.db import Database
from sentinel.incidents.log_events import DbCursorStore, DbPositionStore
from sentinel.paths import bundled_dir


@dataclass(frozen=True)
class PolledLogSource:
    """A log source and how often to poll it."""

    source: LogSource
    interval_ms: int


@dataclass(frozen=True)
class XlaCacheWatch:
    """A target's XLA compilation cache directory, checked every `interval_ms`."""

    target: str
    path: str
    interval_ms: int = DEFAULT_XLA_CACHE_POLL_MS


def signatures_path(config: Config) -> Path:
    """The crash-signature file: the config's `signatures`, else the bundled one."""
    if config.signatures:
        return config.config_dir / config.signatures
    return bundled_dir("rules") / "signatures.yaml"


def has_log_sources(config: Config) -> bool:
    """Whether any target reads logs (and so needs the signatures)."""
    return any(t.logs.files or t.logs.docker or t.logs.journal or t.logs.cloud_logging
               for t in config.targets)


def build_log_sources(config: Config, db: Database, since_ms: int | None = None,
                      ) -> list[PolledLogSource]:
    """Every log source of every target, each attached from `since_ms` on.

    `since_ms` is when Sentinel began watching (the daemon's start, before it
    reports ready): a source without a saved position reads what was written
    from then on, not from its first poll or request, so a crash written right
    after "ready" is not lost to the time a follower takes to attach (issue 53).
    """
    out: list[PolledLogSource] = []
    for t in config.targets:
        every = t.logs.poll_interval_ms
        for path in t.logs.files:
            # auto_commit off: LogWatch saves the position with the events, as for
            # Cloud Logging. Attached now: joined at the end the file has before ready.
            source = LogFileSource(t.name, path, offset_store=DbPositionStore(db),
                                   auto_commit=False)
            source.attach()
            out.append(PolledLogSource(source, every))
        # The Engine API, resumed from the saved cursor (LogWatch saves it with the events).
        out += [PolledLogSource(DockerApiLogSource(t.name, c, t.logs.docker_socket,
                                                   cursor_store=DbCursorStore(db),
                                                   since_ms=since_ms), every)
                for c in t.logs.docker]
        # journald's cursor, saved by LogWatch with the events: resumed after a restart.
        out += [PolledLogSource(journal_logs(t.name, u, directory=t.logs.journal_directory,
                                             cursor_store=DbCursorStore(db),
                                             since_ms=since_ms), every)
                for u in t.logs.journal]
        if t.logs.cloud_logging is not None:
            out.append(_cloud_logging(t, db))
    return out


def _anonymous() -> object:
    # google.auth is imported only for a Cloud source: it pulls in ~17 MB of
    # libraries a daemon without one should not hold.
    from google.auth.credentials import AnonymousCredentials

    return AnonymousCredentials()


def _cloud_logging(t: TargetConfig, db: Database) -> PolledLogSource:
    cl = t.logs.cloud_logging
    assert cl is not None
    creds = _anonymous() if cl.credentials == "anonymous" else None

    def client() -> object:
        return make_client(cl.project, api_endpoint=cl.api_endpoint, credentials=creds)

    # auto_commit off: the cursor is saved in the same transaction as the
    # events it led to (LogWatch), so a restart neither misses nor recounts.
    source = CloudLoggingSource(
        t.name, cl.project, cursor_store=DbCursorStore(db), client_factory=client,
        filter=cl.filter or default_filter(cl.node_id), auto_commit=False,
    )
    return PolledLogSource(source, cl.poll_interval_ms)


def build_tpu_sources(config: Config) -> list[tuple[TpuNodeSource, int]]:
    """A TPU node source, with its poll interval, for each target on a Cloud TPU."""
    out = []
    for t in config.targets:
        if t.tpu is None:
            continue
        tpu = t.tpu
        creds = _anonymous() if tpu.credentials == "anonymous" else None

        def client(tpu=tpu, creds=creds) -> object:  # noqa: ANN001 (bind per target)
            return make_tpu_client(api_endpoint=tpu.api_endpoint, credentials=creds)

        source = TpuNodeSource(t.name, tpu.node_name, queued_resource=tpu.queued_resource_name,
                               client_factory=client)
        out.append((source, tpu.poll_interval_ms))
    return out


def build_xla_cache_watches(config: Config) -> list[XlaCacheWatch]:
    """One watch for each target that names its XLA cache directory."""
    return [XlaCacheWatch(t.name, t.xla_cache_path) for t in config.targets if t.xla_cache_path]
