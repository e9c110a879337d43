"""A local fake of the Kubernetes REST API (pods, and apps/v1 workloads), on 127.0.0.1.

What the official client and `kubectl proxy` users see of a real API server:

- `GET /api/v1/pods` and `/api/v1/namespaces/NS/pods` list (`labelSelector`,
  `limit` + `continue`, the list's `metadata.resourceVersion`), or with
  `watch=true` stream events as chunked JSON lines (`{"type": ..., "object": ...}`)
  from `resourceVersion` until `timeoutSeconds`: ADDED, MODIFIED, DELETED, and
  BOOKMARK when `allowWatchBookmarks` (every `bookmark_every_s`). As in the
  API server's watch cache, an object that stops matching the selector is sent
  as DELETED and one that starts matching as ADDED. A version older than the
  history kept (`compact()`) answers an ERROR event with a 410 Status.
- `GET`/`DELETE /api/v1/namespaces/NS/pods/NAME`; DELETE honours
  `preconditions.uid` (409 Conflict) and calls `on_delete(pod)` afterwards so
  a test can play the controller that recreates it.
- `GET`/`PATCH /apis/apps/v1/namespaces/NS/{deployments,statefulsets,replicasets}/NAME`;
  PATCH takes strategic-merge and merge patches (deep merge), bumps
  `metadata.generation` when the spec changed, and calls `on_patch`.

Errors are `Status` objects. `fail_next(n, status)` fails the next n requests;
`drop_watches()` cuts every open watch as a broken connection would. Every
request is kept in `requests`, every delete and patch in `deletes`/`patches`.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

_LIST = re.compile(r"^/api/v1(?:/namespaces/([^/]+))?/pods$")
_POD = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$")
_APPS = re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/(deployments|statefulsets|replicasets)"
                   r"/([^/]+)$")
_KINDS = {"pods": ("v1", "Pod"), "deployments": ("apps/v1", "Deployment"),
          "statefulsets": ("apps/v1", "StatefulSet"), "replicasets": ("apps/v1", "ReplicaSet")}
Key = tuple[str, str, str]  # (resource, namespace, name)


def now_rfc3339() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality- and set-based label selectors, as the API server reads them."""
    parts, depth, cur = [], 0, ""
    for ch in selector or "":
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    for req in [*parts, cur]:
        req = req.strip()
        if not req:
            continue
        m = re.match(r"^(\S+)\s+(in|notin)\s*\((.*)\)$", req)
        if m:
            values = {v.strip() for v in m.group(3).split(",")}
            inside = m.group(1) in labels and labels[m.group(1)] in values
            if inside != (m.group(2) == "in"):
                return False
        elif req.startswith("!"):
            if req[1:].strip() in labels:
                return False
        elif "!=" in req:
            k, v = (s.strip() for s in req.split("!=", 1))
            if labels.get(k) == v:
                return False
        elif "=" in req:
            k, v = (s.strip() for s in req.replace("==", "=").split("=", 1))
            if labels.get(k) != v:
                return False
        elif req not in labels:
            return False
    return True


def deep_merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386): maps merge, null deletes, the rest replaces."""
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class FakeKube:
    """The fake API: objects by (resource, namespace, name), an event history, fault injection."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.rv = 1000
        # (resourceVersion, key, type, old object or None, new object or None)
        self.history: list[tuple[int, Key, str, Any, Any]] = []
        self.compacted_rv = 0
        self.requests: list[tuple[str, str, int]] = []
        self.deletes: list[tuple[str, str, str]] = []  # (namespace, name, uid)
        self.patches: list[tuple[str, str, str, str, Any]] = []  # (res, ns, name, ctype, body)
        self.on_delete: Callable[[dict[str, Any]], None] | None = None
        self.on_patch: Callable[[str, dict[str, Any]], None] | None = None
        self.bookmark_every_s: float | None = None
        # Set to an Event: a watch's response headers wait for it (a slow API server).
        self.watch_headers_gate: threading.Event | None = None
        self.open_watches = 0
        self._fail: list[int] = []
        self._generation = 0  # bumped by drop_watches()
        self._uid = 0
        self._cond = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        daemon=True)

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`: the `api_server` of Sentinel's config."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeKube:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.drop_watches()
        self._server.shutdown()
        self._server.server_close()

    # -- state, as a controller or the kubelet would change it ------------------------

    def put(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object (ADDED or MODIFIED); it gets a uid and a version."""
        obj = copy.deepcopy(obj)
        m = obj.setdefault("metadata", {})
        key = (resource, m.get("namespace", "default"), m["name"])
        api, kind = _KINDS[resource]
        obj.setdefault("apiVersion", api)
        obj.setdefault("kind", kind)
        m.setdefault("namespace", key[1])
        m.setdefault("creationTimestamp", now_rfc3339())
        with self._cond:
            old = self.objects.get(key)
            if "uid" not in m:
                self._uid += 1
                m["uid"] = old["metadata"]["uid"] if old else f"uid-{self._uid:04d}"
            self._commit(key, "MODIFIED" if old else "ADDED", old, obj)
        return obj

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._cond:
            obj = self.objects.get((resource, namespace, name))
            return copy.deepcopy(obj) if obj else None

    def update(self, resource: str, namespace: str, name: str,
               change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Apply `change` to a copy of the object and store it (MODIFIED)."""
        with self._cond:
            old = self.objects[(resource, namespace, name)]
            new = copy.deepcopy(old)
            change(new)
            self._commit((resource, namespace, name), "MODIFIED", old, new)
            return copy.deepcopy(new)

    def remove(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Delete an object (DELETED)."""
        with self._cond:
            old = self.objects.get((resource, namespace, name))
            if old is not None:
                self._commit((resource, namespace, name), "DELETED", old, None)
            return old

    def _commit(self, key: Key, kind: str, old: Any, new: Any) -> None:
        self.rv += 1
        if new is not None:
            new["metadata"]["resourceVersion"] = str(self.rv)
            self.objects[key] = new
        else:
            old = copy.deepcopy(old)
            old["metadata"]["resourceVersion"] = str(self.rv)
            self.objects.pop(key, None)
        self.history.append((self.rv, key, kind, copy.deepcopy(old), copy.deepcopy(new)))
        self._cond.notify_all()

    # -- faults ---------------------------------------------------------------------------

    def compact(self) -> None:
        """Forget the history so far: watches from an older version get 410 Gone."""
        with self._cond:
            self.compacted_rv = self.rv
            self.history.clear()

    def drop_watches(self) -> None:
        """End every open watch stream abruptly (no final chunk), like a lost connection."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def fail_next(self, n: int, status: int = 500) -> None:
        with self._cond:
            self._fail += [status] * n

    def clear_failures(self) -> None:
        with self._cond:
            self._fail.clear()

    def take_failure(self) -> int | None:
        with self._cond:
            return self._fail.pop(0) if self._fail else None

    # -- reads for the handler ------------------------------------------------------------

    def list(self, resource: str, namespace: str | None, selector: str) -> tuple[list[Any], int]:
        with self._cond:
            items = [copy.deepcopy(o) for (r, ns, _), o in sorted(self.objects.items())
                     if r == resource and (namespace is None or ns == namespace)
                     and selector_matches(selector, o["metadata"].get("labels") or {})]
            return items, self.rv

    def events_since(self, since: int, resource: str, namespace: str | None, selector: str,
                     generation: int, until: float) -> tuple[list[tuple[str, Any]], int] | None:
        """Events after `since` for one watch (waiting up to `until`); None: cut, or 410."""
        def matches(obj: Any) -> bool:
            return obj is not None and selector_matches(selector, obj["metadata"].get("labels")
                                                         or {})

        with self._cond:
            while True:
                if generation != self._generation:
                    return None
                out = []
                for rv, (r, ns, _), kind, old, new in self.history:
                    if rv <= since or r != resource or (namespace is not None and ns != namespace):
                        continue
                    was, now = matches(old), matches(new)
                    if kind == "DELETED" and was:
                        out.append(("DELETED", old))
                    elif now and not was:
                        out.append(("ADDED", new))
                    elif was and not now and new is not None:
                        deleted = copy.deepcopy(old)
                        deleted["metadata"]["resourceVersion"] = str(rv)
                        out.append(("DELETED", deleted))
                    elif was and now:
                        out.append(("MODIFIED", new))
                if out or time.monotonic() >= until:
                    return out, self.rv
                self._cond.wait(min(0.05, max(0.0, until - time.monotonic())))


def _handler_for(fake: FakeKube) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            # Logged before the answer goes out: a client that has the answer (and a test
            # that saw it act on it) must find the request in the log.
            with fake._cond:
                fake.requests.append((self.command, self.path, status))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _fail(self, status: int, reason: str, message: str) -> None:
            self._send(status, status_body(status, reason, message))

        def _body(self) -> Any:
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n) or b"null") if n else None

        def _route(self) -> None:
            failure = fake.take_failure()
            if failure is not None:
                self._body()
                self._fail(failure, "InternalError", "injected failure")
                return
            url = urlsplit(self.path)
            q = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if (m := _LIST.match(url.path)) and self.command == "GET":
                if q.get("watch", "").lower() in ("true", "1"):
                    self._watch(m.group(1), q)
                else:
                    self._list(m.group(1), q)
            elif m := _POD.match(url.path):
                self._object("pods", m.group(1), m.group(2))
            elif m := _APPS.match(url.path):
                self._object(m.group(2), m.group(1), m.group(3))
            else:
                self._fail(404, "NotFound", f"the server could not find {url.path}")

        do_GET = do_DELETE = do_PATCH = _route  # noqa: N815

        def _list(self, namespace: str | None, q: dict[str, str]) -> None:
            items, rv = fake.list("pods", namespace, q.get("labelSelector", ""))
            start = int(q.get("continue") or 0)
            limit = int(q.get("limit") or 0) or len(items) or 1
            page = items[start:start + limit]
            meta: dict[str, Any] = {"resourceVersion": str(rv)}
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
            self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                             "items": page})

        def _object(self, resource: str, ns: str, name: str) -> None:
            body = self._body()
            obj = fake.get(resource, ns, name)
            if obj is None:
                self._fail(404, "NotFound", f'{resource} "{name}" not found')
                return
            if self.command == "GET":
                self._send(200, obj)
            elif self.command == "DELETE" and resource == "pods":
                want = ((body or {}).get("preconditions") or {}).get("uid")
                if want and want != obj["metadata"]["uid"]:
                    self._fail(409, "Conflict", f"Precondition failed: UID in precondition: "
                               f"{want}, UID in object meta: {obj['metadata']['uid']}")
                    return
                fake.remove("pods", ns, name)
                with fake._cond:
                    fake.deletes.append((ns, name, obj["metadata"]["uid"]))
                self._send(200, obj)
                if fake.on_delete is not None:
                    fake.on_delete(obj)
            elif self.command == "PATCH" and resource != "pods":
                self._patch(resource, ns, name, obj, body)
            else:
                self._fail(405, "MethodNotAllowed", f"{self.command} not supported here")

        def _patch(self, resource: str, ns: str, name: str, obj: Any, body: Any) -> None:
            ctype = self.headers.get("Content-Type", "")
            if "merge-patch" not in ctype or not isinstance(body, dict):
                self._fail(415, "UnsupportedMediaType", f"unsupported patch type {ctype}")
                return

            def change(o: dict[str, Any]) -> None:
                merged = deep_merge(o, body)
                if merged.get("spec") != o.get("spec"):
                    merged["metadata"]["generation"] = o["metadata"].get("generation", 1) + 1
                o.clear()
                o.update(merged)

            new = fake.update(resource, ns, name, change)
            with fake._cond:
                fake.patches.append((resource, ns, name, ctype, body))
            self._send(200, new)
            if fake.on_patch is not None:
                fake.on_patch(resource, new)

        def _watch(self, namespace: str | None, q: dict[str, str]) -> None:
            since = int(q.get("resourceVersion") or 0)
            until = time.monotonic() + float(q.get("timeoutSeconds") or 1800)
            selector = q.get("labelSelector", "")
            bookmarks = q.get("allowWatchBookmarks", "").lower() in ("true", "1")
            with fake._cond:
                generation = fake._generation
                fake.requests.append((self.command, self.path, 200))
                fake.open_watches += 1
            if fake.watch_headers_gate is not None:  # the client waits for the headers
                fake.watch_headers_gate.wait(60)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                if since and since < fake.compacted_rv:
                    self._chunk({"type": "ERROR", "object": status_body(
                        410, "Expired", f"too old resource version: {since} "
                        f"({fake.compacted_rv})")})
                else:
                    self._stream(since, namespace, selector, generation, until, bookmarks)
                    return
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
            finally:
                with fake._cond:
                    fake.open_watches -= 1

        def _stream(self, since: int, namespace: str | None, selector: str, generation: int,
                    until: float, bookmarks: bool) -> None:
            next_bookmark = time.monotonic() + (fake.bookmark_every_s or 1e9)
            while time.monotonic() < until:
                got = fake.events_since(since, "pods", namespace, selector, generation,
                                        min(until, next_bookmark))
                if got is None:  # cut: close without the final chunk
                    self.close_connection = True
                    return
                events, rv = got
                for kind, obj in events:
                    self._chunk({"type": kind, "object": obj})
                    since = int(obj["metadata"]["resourceVersion"])
                if bookmarks and time.monotonic() >= next_bookmark:
                    since = max(since, rv)
                    self._chunk({"type": "BOOKMARK", "object": {
                        "kind": "Pod", "apiVersion": "v1",
                        "metadata": {"resourceVersion": str(since)}}})
                    next_bookmark = time.monotonic() + (fake.bookmark_every_s or 1e9)
            self.wfile.write(b"0\r\n\r\n")

        def _chunk(self, event: dict[str, Any]) -> None:
            data = json.dumps(event).encode() + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


def pod(name: str, *, namespace: str = "default", labels: dict[str, str] | None = None,
        ip: str | None = "10.0.0.1", port: int = 8000, port_name: str = "http",
        ready: bool = True, phase: str = "Running", owner: tuple[str, str, str] | None = None,
        env: dict[str, str] | None = None, volumes: list[dict[str, Any]] | None = None,
        mounts: list[dict[str, Any]] | None = None, node: str = "node-1") -> dict[str, Any]:
    """A Pod object as the API returns it; `owner` is (kind, name, uid) of its controller."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1],
                                    "uid": owner[2], "controller": True,
                                    "blockOwnerDeletion": True}]
    container: dict[str, Any] = {
        "name": "vllm", "image": "vllm/vllm-tpu:latest",
        "ports": [{"name": port_name, "containerPort": port, "protocol": "TCP"}],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "volumeMounts": mounts or []}
    status: dict[str, Any] = {"phase": phase, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [container],
                                       "volumes": volumes or []}, "status": status}
