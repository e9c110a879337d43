"""`sentinel sim` options for the simulated container (Docker API socket, cache, log file)."""

from __future__ import annotations

import argparse

from sentinel.sim.container import ContainerSpec


def add_container_args(p: argparse.ArgumentParser) -> None:
    """--docker-socket and the container's behaviour."""
    p.add_argument("--docker-socket", metavar="PATH",
                   help="also serve a Docker-Engine-API subset for this server as a container "
                   "on the unix socket PATH (inspect, stop, start, restart)")
    p.add_argument("--container", default="vllm", help="container name (default vllm)")
    p.add_argument("--xla-cache", metavar="DIR",
                   help="the container's VLLM_XLA_CACHE_PATH; a start is warm when it has files")
    p.add_argument("--log-file", metavar="PATH", help="where crashes write their traceback")
    p.add_argument("--warm-start", type=float, default=1.0, metavar="SECONDS",
                   help="time to serve after a warm start (default 1)")
    p.add_argument("--cold-start", type=float, default=60.0, metavar="SECONDS",
                   help="time to serve after a cold start, compiling (default 60)")


def container_spec(args: argparse.Namespace) -> ContainerSpec:
    """The ContainerSpec the options describe."""
    return ContainerSpec(name=args.container, xla_cache=args.xla_cache, log_file=args.log_file,
                         warm_start_s=args.warm_start, cold_start_s=args.cold_start)
