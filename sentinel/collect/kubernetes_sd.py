"""Targets from the Kubernetes API: pods matching a label selector, kept in sync by a watch.

`pod_target` (pure) turns one pod into a `TargetConfig` (or None: no IP yet,
finished, being deleted, no such port). `KubernetesDiscovery` runs one
list-then-watch loop per namespace (or one for all namespaces) in a thread
and calls `on_add(target)` (new or changed) and `on_remove(name)` as pods
come and go, so a Deployment or LeaderWorkerSet that scales needs no config
edit. The loop is the informer's, by hand:

- list (in pages of 500), remember the list's resourceVersion, diff against
  what was known, then watch from that version with bookmarks;
- each event moves the version on; a watch the server ends (timeout) is
  resumed from the last version, without a list;
- "410 Gone" (the version fell out of the API's history) means events were
  missed: list again and diff, so a pod deleted meanwhile is removed;
- any other failure (connection, 5xx, 403) is recorded (`last_error`,
  a counter) and retried after an exponential, jittered backoff; the known
  targets stay as they are meanwhile, so an API outage never empties the fleet.

A terminating pod is removed at once (its deletion was intended and must
not page as "target down"); a pod that is not Ready stays a target, since
a crashed vLLM is exactly what Sentinel must see.

Deaths: with an `on_death(target, line)` hook, each container whose
`lastState.terminated` moved on since the pod was last seen (the kubelet
restarted it after it ended non-zero) is reported once, as one line in
`kubectl describe`'s words (`logs/deaths.py`), for the target's stream.
What ended before discovery first saw the pod is history, not reported,
unless it ended after `since_ms` (the daemon's start): discovery's first
list may come after the daemon reports ready, and a death in between is news.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from sentinel.backoff import Backoff, ErrorKind
from sentinel.collect.kubeapi import (
    api_client,
    as_kube_error,
    container_port,
    meta,
    read_json,
)
from sentinel.config.durations import format_duration
from sentinel.config.kubernetes import KubernetesSDConfig
from sentinel.config.model import TargetConfig
from sentinel.logs.deaths import pod_termination_lines

log = logging.getLogger(__name__)

PAGE_SIZE = 500
CONNECT_TIMEOUT_S = 10.0
# The client's read timeout exceeds the server's watch timeout by this much, so a
# stalled connection is noticed and a quiet, healthy one is not cut short.
READ_SLACK_S = 15.0
_FIRST_SIGHT_MEMORY = 4_096  # deaths reported at first sight, remembered against repeats
_INVALID = re.compile(r"[^a-zA-Z0-9_]")
PodKey = tuple[str, str]  # (namespace, name)


class Gone(Exception):
    """410: the resourceVersion is too old; list again."""


def label_name(key: str) -> str | None:
    """A Kubernetes label key as a Prometheus label name (`app.kubernetes.io/name` →
    `app_kubernetes_io_name`), as Prometheus's kubernetes_sd does; None if unusable."""
    name = _INVALID.sub("_", key)
    name = f"_{name}" if name[:1].isdigit() else name
    return None if not name or name.startswith("__") else name


def pod_target(pod: dict[str, Any], sd: KubernetesSDConfig, interval_ms: int,
               timeout_ms: int) -> TargetConfig | None:
    """The target a pod makes, or None when it makes none now."""
    m = meta(pod)
    status = pod.get("status") or {}
    ip = status.get("podIP")
    if not ip or m.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    found = container_port(pod, sd.port)
    if found is None:
        return None
    container, port = found
    namespace, name = str(m.get("namespace", "")), str(m.get("name", ""))
    labels: dict[str, str] = {}
    if sd.pod_labels:
        for key, value in sorted((m.get("labels") or {}).items()):
            ln = label_name(key)
            if ln is not None:
                labels[ln] = str(value)
    labels.update(sd.labels)
    labels.update(namespace=namespace, pod=name, container=container,
                  node=str((pod.get("spec") or {}).get("nodeName") or ""))
    host = f"[{ip}]" if ":" in ip else ip
    interval = sd.scrape_interval_ms or interval_ms
    timeout = sd.scrape_timeout_ms or min(timeout_ms, interval)
    return TargetConfig.model_validate({
        "name": sd.target_name.replace("{namespace}", namespace).replace("{pod}", name),
        "url": f"{sd.scheme}://{host}:{port}", "metrics_path": sd.metrics_path,
        "scrape_interval": format_duration(interval), "scrape_timeout": format_duration(timeout),
        "labels": {k: v for k, v in labels.items() if v != ""},
        "xla_cache_path": sd.xla_cache_path})


def safe_pod_target(pod: Any, sd: KubernetesSDConfig, interval_ms: int,
                    timeout_ms: int) -> tuple[TargetConfig | None, str | None]:
    """(target, None), or (None, why) for a pod object of the wrong shape.

    The API server's objects are trusted to be pods, but one malformed object
    (a port that is not a number, labels that are a list, a name the config
    refuses) must cost that pod its target, not the namespace its discovery.
    """
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata") or {}, dict):
        return None, "not a pod object"
    try:
        return pod_target(pod, sd, interval_ms, timeout_ms), None
    except (AttributeError, KeyError, TypeError, ValueError) as exc:  # ValidationError too
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def pod_key(pod: Any, namespace: str = "") -> PodKey | None:
    """(namespace, name) of a pod object, None when it has no usable metadata."""
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata") or {}, dict):
        return None
    m = meta(pod)
    return str(m.get("namespace", namespace) or namespace), str(m.get("name", ""))


class SDMetrics:
    """Discovery's own series, labelled by the discovery's name."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        kw: dict[str, Any] = {"registry": registry} if registry is not None else {}
        self.targets = Gauge("sentinel_kubernetes_sd_targets", "Targets discovered now",
                             ["sd"], **kw)
        self.synced = Gauge("sentinel_kubernetes_sd_synced",
                            "1 once every namespace was listed and its watch runs", ["sd"], **kw)
        self.errors = Counter("sentinel_kubernetes_sd_errors_total",
                              "Failed lists and watches (retried with backoff)", ["sd"], **kw)
        self.relists = Counter("sentinel_kubernetes_sd_relists_total",
                               "Full lists (start, 410 Gone)", ["sd"], **kw)
        self.events = Counter("sentinel_kubernetes_sd_watch_events_total",
                              "Watch events received", ["sd", "type"], **kw)


class KubernetesDiscovery:
    """One `kubernetes_sd` block: keeps `targets()` equal to the matching pods' targets."""

    def __init__(self, sd: KubernetesSDConfig, on_add: Callable[[TargetConfig], None],
                 on_remove: Callable[[str], None], *, interval_ms: int, timeout_ms: int,
                 metrics: SDMetrics | None = None,
                 client_factory: Callable[[Any], Any] = api_client,
                 on_death: Callable[[str, str], None] | None = None,
                 since_ms: int | None = None) -> None:
        self.sd = sd
        self.since_ms = since_ms  # deaths at or after it are news even at a pod's first sight
        self.on_add = on_add
        self.on_remove = on_remove
        self.on_death = on_death
        self.interval_ms = interval_ms
        self.timeout_ms = timeout_ms
        self.metrics = metrics
        self.client_factory = client_factory
        self.last_error: str | None = None
        self._pods: dict[PodKey, TargetConfig] = {}  # pods that make a target now
        self._names: dict[str, PodKey] = {}  # target name → the pod that holds it
        self._malformed: set[PodKey] = set()  # pods whose object was of the wrong shape
        self._statuses: dict[PodKey, dict[str, Any]] = {}  # container statuses last seen
        # Deaths reported at a pod's first sight (since `since_ms`), newest last: a pod
        # dropped and seen again (not ready, relisted) must not report them again.
        self._first_sight_deaths: dict[str, None] = {}
        self._synced: set[str] = set()
        self._versions: dict[str, str] = {}  # namespace ("" = all) → resourceVersion to resume
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watches: list[Any] = []
        self._threads = [threading.Thread(target=self._loop, args=(ns,), daemon=True,
                                          name=f"sentinel-k8s-sd-{sd.name}-{ns or 'all'}")
                         for ns in (sd.namespaces or ("",))]

    # -- lifecycle and state -------------------------------------------------------

    def start(self) -> KubernetesDiscovery:
        """Start the list-and-watch threads."""
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop watching (the open watch connections are shut) and join the threads.

        A watch whose response had not come yet has no connection to shut: its stream
        would then sit until the server ends the quiet watch (minutes). So the watches
        are told again until every thread is gone or the timeout passes.
        """
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            while t.is_alive() and (left := deadline - time.monotonic()) > 0:
                with self._lock:
                    for w in self._watches:
                        w.stop()
                t.join(min(0.1, left))

    def targets(self) -> list[TargetConfig]:
        """The targets discovered now, by name."""
        with self._lock:
            return sorted(self._pods.values(), key=lambda t: t.name)

    @property
    def synced(self) -> bool:
        """True once every namespace was listed (targets() is then complete)."""
        return len(self._synced) == len(self._threads)

    # -- the loop ------------------------------------------------------------------------

    def _loop(self, namespace: str) -> None:
        backoff = Backoff(self.sd.backoff_initial_ms, self.sd.backoff_max_ms)
        client = None
        while not self._stop.is_set():
            try:
                if client is None:
                    client = self.client_factory(self.sd.api)
                if namespace not in self._versions:
                    self._versions[namespace] = self._relist(client, namespace)
                self._watch(client, namespace)
                backoff.succeeded()
            except Gone:
                self._versions.pop(namespace, None)  # events were missed: list again, at once
            except Exception as exc:  # nothing escapes the thread unrecorded
                err = as_kube_error(exc)
                self.last_error = str(err)
                if self.metrics:
                    self.metrics.errors.labels(self.sd.name).inc()
                delay = backoff.failed(0, ErrorKind(err.retryable, str(err)))
                log.warning("kubernetes_sd %s (%s): %s; retrying in %.1fs", self.sd.name,
                            namespace or "all namespaces", err, delay / 1000)
                self._stop.wait(delay / 1000)
        if client is not None:
            client.close()

    def _list_call(self, client: Any, namespace: str) -> tuple[Callable[..., Any], list[Any]]:
        from kubernetes import client as k

        core = k.CoreV1Api(client)
        if namespace:
            return core.list_namespaced_pod, [namespace]
        return core.list_pod_for_all_namespaces, []

    def _selectors(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label_selector": self.sd.label_selector}
        if self.sd.field_selector:
            out["field_selector"] = self.sd.field_selector
        return out

    def _relist(self, client: Any, namespace: str) -> str:
        """List every matching pod (paged); replace what this namespace knew; the version."""
        call, args = self._list_call(client, namespace)
        pods: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            try:
                resp = call(*args, **self._selectors(), limit=PAGE_SIZE,
                            _continue=token, _preload_content=False,
                            _request_timeout=(CONNECT_TIMEOUT_S, 60.0))
            except Exception as exc:
                err = as_kube_error(exc)
                if err.status == 410:  # the continue token expired: start the list over
                    pods, token = [], None
                    continue
                raise err from None
            body = read_json(resp)
            pods += body.get("items") or []
            token = (body.get("metadata") or {}).get("continue") or None
            if token is None:
                break
        version = str((body.get("metadata") or {}).get("resourceVersion", ""))
        keyed = ((pod_key(p, namespace), p) for p in pods)
        fresh = {key: p for key, p in keyed if key is not None}
        with self._lock:
            for key in [k for k in self._pods if (not namespace or k[0] == namespace)
                        and k not in fresh]:
                self._drop(key)
            for pod in fresh.values():
                self._apply(pod)
            self._synced.add(namespace)
            self._report()
        if self.metrics:
            self.metrics.relists.labels(self.sd.name).inc()
        self.last_error = None
        return version

    def _watch(self, client: Any, namespace: str) -> None:
        """Watch from the namespace's version until the server ends the watch.

        Every event (bookmarks too) moves `_versions[namespace]` on at once, so a watch
        that breaks resumes from the last event it delivered, not from where it began.
        """
        from kubernetes import watch

        call, args = self._list_call(client, namespace)
        version = self._versions[namespace]
        w = watch.Watch()
        with self._lock:
            if self._stop.is_set():
                return
            self._watches.append(w)
        timeout_s = self.sd.watch_timeout_ms // 1000 or 1
        try:
            for event in w.stream(call, *args, **self._selectors(), resource_version=version,
                                  allow_watch_bookmarks=True, timeout_seconds=timeout_s,
                                  _request_timeout=(CONNECT_TIMEOUT_S, timeout_s + READ_SLACK_S)):
                version = self._event(event, version)
                self._versions[namespace] = version
        except Exception as exc:
            if getattr(exc, "status", None) == 410:
                raise Gone from None
            if self._stop.is_set():
                return  # the stream was shut by stop()
            raise
        finally:
            with self._lock:
                self._watches.remove(w)
        self.last_error = None

    def _event(self, event: dict[str, Any], version: str) -> str:
        kind, obj = str(event.get("type")), event.get("raw_object") or {}
        if self.metrics:
            self.metrics.events.labels(self.sd.name, kind).inc()
        key = pod_key(obj)
        if key is None:
            return version  # not an object at all: nothing to apply, keep the version
        version = str(meta(obj).get("resourceVersion") or version)
        if kind == "BOOKMARK":
            return version
        with self._lock:
            if kind == "DELETED":
                self._drop(key)
            elif kind in ("ADDED", "MODIFIED"):
                self._apply(obj)
            self._report()
        return version

    # -- state changes (under the lock) --------------------------------------------------

    def _apply(self, pod: dict[str, Any]) -> None:
        key = (str(meta(pod).get("namespace", "")), str(meta(pod).get("name", "")))
        target, why = safe_pod_target(pod, self.sd, self.interval_ms, self.timeout_ms)
        self._deaths(key, pod, target)
        if why is not None and key not in self._malformed:
            self._malformed.add(key)  # logged once per pod, not at every event
            log.warning("kubernetes_sd %s: pod %s skipped: %s", self.sd.name, "/".join(key), why)
        if target is None:
            self._drop(key)
            return
        holder = self._names.get(target.name)
        if holder is not None and holder != key:
            log.warning("kubernetes_sd %s: pods %s and %s both make target %r; set "
                        "target_name: \"{namespace}.{pod}\"", self.sd.name, "/".join(holder),
                        "/".join(key), target.name)
            return
        if self._pods.get(key) == target:
            return
        old = self._pods.get(key)
        if old is not None and old.name != target.name:
            self._drop(key)
        self._pods[key] = target
        self._names[target.name] = key
        self._call(self.on_add, target)

    def _deaths(self, key: PodKey, pod: dict[str, Any], target: TargetConfig | None) -> None:
        """Report each container of `pod` that died since the pod was last seen."""
        hook = self.on_death
        if hook is None:
            return
        status = pod.get("status")
        if not isinstance(status, dict):
            return
        seen = {"metadata": pod.get("metadata"), "status": {
            k: status.get(k) for k in ("containerStatuses", "initContainerStatuses")}}
        old = self._statuses.get(key)
        self._statuses[key] = seen
        known = self._pods.get(key)
        name = target.name if target is not None else known.name if known is not None else None
        if name is None:
            return
        try:
            since = self.since_ms / 1000 if self.since_ms is not None else None
            lines = pod_termination_lines(old, seen, since)
        except (AttributeError, TypeError, ValueError):  # a malformed status: no death read
            return
        if old is None:
            lines = self._new_at_first_sight(lines)
        for line in lines:
            self._call(functools.partial(hook, name), line)

    def _new_at_first_sight(self, lines: list[str]) -> list[str]:
        """The deaths not reported before (a line names pod, container, finish and count)."""
        new = [line for line in lines if line not in self._first_sight_deaths]
        for line in new:
            self._first_sight_deaths[line] = None
        while len(self._first_sight_deaths) > _FIRST_SIGHT_MEMORY:
            del self._first_sight_deaths[next(iter(self._first_sight_deaths))]
        return new

    def _drop(self, key: PodKey) -> None:
        self._statuses.pop(key, None)
        old = self._pods.pop(key, None)
        if old is not None:
            self._names.pop(old.name, None)
            self._call(self.on_remove, old.name)

    def _call(self, hook: Callable[[Any], None], arg: Any) -> None:
        try:
            hook(arg)
        except Exception:  # a hook's bug must not stop discovery
            log.exception("kubernetes_sd %s: hook failed", self.sd.name)

    def _report(self) -> None:
        if self.metrics:
            self.metrics.targets.labels(self.sd.name).set(len(self._pods))
            self.metrics.synced.labels(self.sd.name).set(int(self.synced))


def discover_once(sd: KubernetesSDConfig, interval_ms: int, timeout_ms: int,
                  client_factory: Callable[[Any], Any] = api_client) -> list[TargetConfig]:
    """List once, without watching (tools and tests); raises KubeError."""
    found: list[TargetConfig] = []
    d = KubernetesDiscovery(sd, found.append, lambda _name: None, interval_ms=interval_ms,
                            timeout_ms=timeout_ms, client_factory=client_factory)
    client = client_factory(sd.api)
    try:
        for ns in sd.namespaces or ("",):
            d._relist(client, ns)
    finally:
        client.close()
    return d.targets()

