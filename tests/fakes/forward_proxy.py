"""A plain HTTP forward proxy on 127.0.0.1 (no CONNECT), for http:// URLs through a proxy.

Clients send absolute-form requests (`GET http://host:port/path HTTP/1.1`); the proxy
forwards each to its origin and relays the answer, or answers 502 when the origin
cannot be reached, as Squid does. Host names under `.invalid` (RFC 2606: never
resolvable) are sent to 127.0.0.1, so a test can name a server only the proxy reaches.
Every request is recorded as (method, absolute URL).
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
        "transfer-encoding", "te", "trailer", "upgrade"}


class ForwardProxy:
    """Start with `start()`; `url` is what HTTP_PROXY is set to; `seen` the requests."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _relay(self) -> None:
                proxy.seen.append((self.command, self.path))
                u = urlsplit(self.path)
                host = "127.0.0.1" if (u.hostname or "").endswith(".invalid") else u.hostname
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                try:
                    conn = http.client.HTTPConnection(host or "", u.port or 80, timeout=10)
                    conn.request(self.command, (u.path or "/") + (f"?{u.query}" if u.query
                                                                  else ""), body, headers)
                    reply = conn.getresponse()
                    data = reply.read()
                    conn.close()
                except OSError as exc:
                    self.send_error(502, f"cannot reach {u.hostname}: {exc}")
                    return
                self.send_response(reply.status)
                for k, v in reply.getheaders():
                    if k.lower() not in _HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_POST = _relay  # noqa: N815 (http.server's names)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ForwardProxy:
        """Serve in a thread."""
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
