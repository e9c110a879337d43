"""The simulated engine's `GET /events`, as the Docker Engine API serves it.

`since` and `until` are UNIX times (fractional seconds allowed; Docker also
takes RFC 3339, not needed here); `filters` is Docker's JSON map, of which
`container` (name or id), `type` and `event` are honoured. Without `until`
the response stays open and streams new events as they happen (chunked),
one JSON object per line, as the engine does.
"""

from __future__ import annotations

import json
import threading
from typing import Any

_WAIT_S = 0.1  # how often a follower looks for new events or a stop


def _wanted(event: dict[str, Any], filters: dict[str, list[str]]) -> bool:
    actor = event.get("Actor", {})
    names = {actor.get("ID", ""), actor.get("Attributes", {}).get("name", "")}
    checks = (("container", names), ("type", {event.get("Type", "")}),
              ("event", {event.get("Action", "")}))
    return all(not filters.get(key) or bool(set(filters[key]) & have) for key, have in checks)


def _filters(query: dict[str, list[str]]) -> dict[str, list[str]]:
    raw = query.get("filters", ["{}"])[0] or "{}"
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    # Docker takes {"event": ["die"]} and the older {"event": {"die": true}}.
    return {k: list(v) for k, v in value.items() if isinstance(v, list | dict)}


def serve(handler: Any, containers: list[Any], query: dict[str, list[str]],
          stopping: threading.Event) -> None:
    """Answer one events request on `handler` (a BaseHTTPRequestHandler)."""
    since_ns = int(float(query.get("since", ["0"])[0] or 0) * 1e9)
    until = query.get("until", [""])[0]
    until_ns = int(float(until) * 1e9) if until else None
    filters = _filters(query)
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    sent = [0] * len(containers)
    try:
        while True:
            found: list[dict[str, Any]] = []
            for i, c in enumerate(containers):
                with c.output_changed:
                    found += c.docker_events[sent[i]:]
                    sent[i] = len(c.docker_events)
            found.sort(key=lambda e: e["timeNano"])
            body = b"".join(json.dumps(e).encode() + b"\n" for e in found
                            if e["timeNano"] >= since_ns and _wanted(e, filters)
                            and (until_ns is None or e["timeNano"] <= until_ns))
            if body:
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
                handler.wfile.flush()
            if until_ns is not None or stopping.is_set():
                break
            with containers[0].output_changed:
                if len(containers[0].docker_events) == sent[0]:
                    containers[0].output_changed.wait(_WAIT_S)
        handler.wfile.write(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client went away: a follower ends so
    handler.close_connection = True
