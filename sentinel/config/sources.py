"""Per-target source configuration: log sources, Cloud Logging, TPU node, XLA cache.

```yaml
targets:
  - name: gemma-26b
    url: http://10.0.0.5:8000
    xla_cache_path: /dev/shm/xla_cache      # VLLM_XLA_CACHE_PATH, where Sentinel can read it
    logs:
      files: [/var/log/vllm/vllm.log]
      docker: [vllm]                          # these containers' logs, Docker Engine API
      docker_socket: /var/run/docker.sock     # (the default) where that API listens
      journal: [vllm.service]                 # `journalctl -f -o json -u` of these units
      # journal_directory: /var/log/journal   # the host's journal, mounted into a container
      cloud_logging:
        project: my-project
        node_id: vllm-gemma4-qr-node          # narrows the default filter to one TPU VM
    tpu:
      project: my-project
      zone: southamerica-west1-a
      node: vllm-gemma4-qr-node
      queued_resource: vllm-gemma4-qr
```
"""

from __future__ import annotations

from pydantic import Field, field_validator

from sentinel.config.base import PositiveDuration, Strict, http_url, problem

DEFAULT_LOG_POLL_MS = 1_000
# The Docker Engine API's unix socket (the same default as docker_restart's).
DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"
DEFAULT_CLOUD_LOGGING_POLL_MS = 10_000
DEFAULT_TPU_POLL_MS = 30_000
DEFAULT_XLA_CACHE_POLL_MS = 60_000
CREDENTIALS = ("default", "anonymous")


class _GoogleApi(Strict):
    """Where a Google API is reached, and with which credentials."""

    project: str = Field(pattern=r"^[a-z][a-z0-9-]{4,61}[a-z0-9]$")
    # Tests and air-gapped sites point the real client library at another endpoint.
    api_endpoint: str | None = None
    # "default": Application Default Credentials; "anonymous": none (local fakes only).
    credentials: str = "default"

    @field_validator("api_endpoint")
    @classmethod
    def _check_endpoint(cls, v: str | None) -> str | None:
        return None if v is None else http_url(v, what="api_endpoint")

    @field_validator("credentials")
    @classmethod
    def _check_credentials(cls, v: str) -> str:
        if v not in CREDENTIALS:
            raise problem(f"must be one of {', '.join(CREDENTIALS)}")
        return v


class CloudLoggingConfig(_GoogleApi):
    """Cloud Logging entries.list for one target."""

    filter: str | None = None  # default: the TPU worker's stderr and warnings
    node_id: str | None = None
    poll_interval_ms: PositiveDuration = Field(DEFAULT_CLOUD_LOGGING_POLL_MS,
                                               alias="poll_interval")


class LogsConfig(Strict):
    """Where a target's logs are read from; any combination."""

    files: tuple[str, ...] = ()
    docker: tuple[str, ...] = ()
    # Container logs are read through the Engine API on this socket (no docker CLI),
    # resumed after a restart from the position saved in the database.
    docker_socket: str = DEFAULT_DOCKER_SOCKET
    journal: tuple[str, ...] = ()
    # Read the journal files in this directory (journalctl --directory), e.g. the host's
    # /var/log/journal mounted into Sentinel's container; default: the local journal.
    journal_directory: str | None = None
    cloud_logging: CloudLoggingConfig | None = None
    poll_interval_ms: PositiveDuration = Field(DEFAULT_LOG_POLL_MS, alias="poll_interval")

    @field_validator("files")
    @classmethod
    def _absolute(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for i, path in enumerate(v):
            if not path.startswith("/"):
                raise problem("log file paths must be absolute", i)
        return v

    @field_validator("journal_directory")
    @classmethod
    def _absolute_dir(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise problem("journal_directory must be an absolute path")
        return v


class TpuConfig(_GoogleApi):
    """The Cloud TPU node (and queued resource) a target runs on."""

    zone: str = Field(pattern=r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
    node: str = Field(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    queued_resource: str | None = None
    poll_interval_ms: PositiveDuration = Field(DEFAULT_TPU_POLL_MS, alias="poll_interval")

    @property
    def node_name(self) -> str:
        """The node's full resource name."""
        return f"projects/{self.project}/locations/{self.zone}/nodes/{self.node}"

    @property
    def queued_resource_name(self) -> str | None:
        """The queued resource's full resource name, if one is configured."""
        if self.queued_resource is None:
            return None
        return f"projects/{self.project}/locations/{self.zone}/queuedResources/" \
            f"{self.queued_resource}"
