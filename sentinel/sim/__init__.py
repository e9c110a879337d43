"""A vLLM-compatible simulator for demos and tests (`sentinel sim`).

`start_sim()` runs one on loopback in a background thread; `POST /sim/state`
(or `SimServer.set_state`) injects load, KV-cache pressure, an unhealthy or
hung engine, latency and broken metric pages.
"""

from sentinel.sim.server import (
    DEFAULT_MAX_MODEL_LEN,
    DEFAULT_MODEL,
    SimConfig,
    SimServer,
    serve_forever_cli,
    start_sim,
)
from sentinel.sim.state import SimState, SimStateError

__all__ = [
    "DEFAULT_MAX_MODEL_LEN",
    "DEFAULT_MODEL",
    "SimConfig",
    "SimServer",
    "SimState",
    "SimStateError",
    "serve_forever_cli",
    "start_sim",
]
