"""`sentinel sim`: the vLLM-compatible simulator, and its simulated container's options."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sentinel.sim.container import ContainerSpec


def add_parser(sub: Any) -> None:
    """Register `sim`."""
    sim = sub.add_parser("sim", help="vLLM-compatible simulator server",
                         description="Serve a vLLM-compatible API (/metrics, /health, /v1/models, "
                         "/v1/chat/completions, /tokenize) with a control API at /sim/state.")
    sim.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    sim.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any free)")
    sim.add_argument("--model", default=None, help="served model name (default a Gemma 4 id)")
    sim.add_argument("--max-model-len", type=int, default=16384,
                     help="context length in tokens (default 16384)")
    sim.add_argument("--engines", type=int, default=1,
                     help="data-parallel engines, one series each (default 1)")
    sim.set_defaults(func=cmd_sim)
    add_container_args(sim)


def add_container_args(p: argparse.ArgumentParser) -> None:
    """--docker-socket and the container's behaviour."""
    p.add_argument("--docker-socket", metavar="PATH",
                   help="also serve a Docker-Engine-API subset for this server as a container "
                   "on the unix socket PATH (inspect, stop, start, restart)")
    p.add_argument("--container", default="vllm", help="container name (default vllm)")
    p.add_argument("--xla-cache", metavar="DIR",
                   help="the container's VLLM_XLA_CACHE_PATH; a start is warm when it has files")
    p.add_argument("--log-file", metavar="PATH", help="where crashes write their traceback")
    p.add_argument("--accelerator", choices=("tpu", "gpu"), default="tpu",
                   help="gpu: serve as a GPU container (--gpus all, NVIDIA_VISIBLE_DEVICES, "
                   "no XLA cache; default tpu)")
    p.add_argument("--compile-cache", metavar="DIR",
                   help="gpu: the container's VLLM_CACHE_ROOT (torch.compile cache); a start "
                   "is warm when it has files (unset: always warm)")
    p.add_argument("--warm-start", type=float, default=1.0, metavar="SECONDS",
                   help="time to serve after a warm start (default 1)")
    p.add_argument("--cold-start", type=float, default=60.0, metavar="SECONDS",
                   help="time to serve after a cold start, compiling (default 60)")


def container_spec(args: argparse.Namespace) -> ContainerSpec:
    """The ContainerSpec the options describe."""
    from sentinel.sim.container import ContainerSpec

    return ContainerSpec(name=args.container, xla_cache=args.xla_cache, log_file=args.log_file,
                         warm_start_s=args.warm_start, cold_start_s=args.cold_start,
                         accelerator=args.accelerator, compile_cache=args.compile_cache)


def cmd_sim(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    from sentinel.sim.server import serve_forever_cli

    kwargs: dict[str, Any] = {"host": args.host, "port": args.port,
                              "max_model_len": args.max_model_len, "engines": args.engines}
    if args.model:
        kwargs["model"] = args.model
    if args.docker_socket:
        kwargs.update(docker_socket=args.docker_socket, container=container_spec(args))
    serve_forever_cli(**kwargs)
    return 0
