# Sentinel as a container.
#   docker build -t sentinel .
#   docker run -p 9465:9465 -v sentinel-data:/var/lib/sentinel \
#     -v $PWD/sentinel.yaml:/etc/sentinel/sentinel.yaml:ro sentinel
# Inside the container Sentinel listens on 0.0.0.0:9465 (SENTINEL_LISTEN), whatever the
# config's `listen` says, so the published port reaches it; off loopback it refuses to
# start unless the config has `api.tokens` (a read and a write token, e.g. from ${ENV}). The SQLite database belongs
# in the /var/lib/sentinel volume (`database: sqlite:////var/lib/sentinel/sentinel.db`).
# For the docker log source and docker_restart, mount /run/docker.sock and add its group
# (`--group-add $(stat -c %g /run/docker.sock)`); for journald, mount /var/log/journal.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SENTINEL_LISTEN=0.0.0.0:9465

# The journald log source runs `journalctl -f` (systemd's client, nothing else); container
# logs and restarts speak the Docker Engine API on the mounted socket, so no docker CLI.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends systemd \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 sentinel \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/sentinel --create-home sentinel \
    && mkdir -p /etc/sentinel

# Dependencies first, from the hash-pinned lock: this layer is rebuilt only when the
# lock changes, not on every code change.
WORKDIR /src
COPY requirements.lock ./
RUN pip install --require-hashes -r requirements.lock

# Then Sentinel itself (rules and migrations are carried inside the package). The lock
# holds the postgres and kubernetes extras.
COPY pyproject.toml setup.py README.md ./
COPY sentinel ./sentinel
COPY rules ./rules
COPY migrations ./migrations
RUN pip install --no-deps . && rm -rf /src/build
# The rules also where a config (and the Kubernetes ConfigMap) names them.
COPY rules /etc/sentinel/rules

USER 10001:10001
WORKDIR /var/lib/sentinel
VOLUME ["/var/lib/sentinel"]
EXPOSE 9465
HEALTHCHECK --interval=30s --timeout=3s --start-period=30s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9465/healthz', timeout=2)"]
ENTRYPOINT ["sentinel"]
CMD ["run", "-c", "/etc/sentinel/sentinel.yaml"]
