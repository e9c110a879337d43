"""One HTTP client for the tests' requests on loopback.

`httpx.get(url)` builds a new Client, and with it a TLS context that loads the
CA bundle, on every call: ~35 ms of CPU for a plain-HTTP request to 127.0.0.1
that then costs ~1 ms. A test polling a daemon every 50 ms spent most of a
core on it, which is both slow and load that makes the other tests late.

`http.get(...)` / `http.post(...)` take httpx's arguments and raise httpx's
errors. Connections are not kept alive: a test's servers come and go, and a
pooled connection to a stopped one would fail the next request instead of
connecting afresh. httpx's Client may be shared between threads.
"""

from __future__ import annotations

import httpx

# 60 s, not httpx's 5: beside stress-ng a daemon's API answer took over 5 s; a request
# that outlasts a minute is a hang, and the test's own wait still bounds it.
http = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0), timeout=60.0)
