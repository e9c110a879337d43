"""The first config's text, from what `look` found: pure, so each choice is tested as text.

The policy fits what was found: a server whose container is on a Docker socket
Sentinel can reach gets its crash log read from the container and a guarded
warm restart of that container; one without gets neither, and a comment that
says what to add. Every choice is explained in a comment beside it, because the
file is the newcomer's first reading of Sentinel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sentinel.firstrun.look import DEFAULT_SOCKET, ServerLook

# Crashes a warm restart of the container fixes (the shipped rules' names).
CRASH_ALERTS = ("VLLMHBMOutOfMemory", "VLLMCUDAOutOfMemory", "VLLMEngineDead",
                "VLLMEngineStalled")
# A TPU server compiles for minutes even from a warm XLA cache; a GPU loads weights.
VERIFY_DEADLINE = {"tpu": "30m", "cuda": "10m", "rocm": "10m", "unknown": "10m"}


@dataclass(frozen=True, slots=True)
class InitOptions:
    """What the command line chose: the listen address and an optional paging webhook."""

    listen: str = "127.0.0.1:9465"
    webhook_env: str | None = None  # the variable that holds the webhook URL


def target_names(looks: Sequence[ServerLook]) -> list[str]:
    """`vllm-0`, `vllm-1`, …: short, stable, and valid wherever a target name goes."""
    return [f"vllm-{i}" for i in range(len(looks))]


def render(looks: Sequence[ServerLook], opts: InitOptions, stamp: str) -> str:
    """The whole config file for `looks`, written at `stamp` (an ISO date, passed in)."""
    names = target_names(looks)
    parts = [_head(len(looks), stamp, opts), _targets(looks, names), _receivers(opts),
             _remediation(looks, names)]
    return "\n".join(p for p in parts if p).rstrip() + "\n"


def _head(n: int, stamp: str, opts: InitOptions) -> str:
    return f"""\
# Written by `sentinel init` on {stamp} for {n} vLLM server(s): what each one said
# about itself is in the comment above it. Every key: docs/reference/configuration.md.
# Check after each edit:   sentinel check config --network THIS_FILE
# Run:                     sentinel run -c THIS_FILE
listen: {opts.listen}         # the API and web page; off loopback needs api.tokens
# database: sqlite:///sentinel.db (the default, beside where `run` starts);
#   postgresql+psycopg://… to share one between two Sentinels (HA)
# rule_files not set: Sentinel loads the rules it ships (crashes, down, latency, KV cache)
"""


def _targets(looks: Sequence[ServerLook], names: list[str]) -> str:
    lines = ["targets:"]
    for look, name in zip(looks, names, strict=True):
        lines += [f"  # {_said(look)}"]
        lines += [f"  #   unanswered: {p}" for p in look.problems]
        lines += [f"  - name: {name}", f"    url: {look.url}"]
        if look.container is not None:
            c = look.container
            lines += ["    logs:", f"      docker: [{c.name}]          # crash lines from "
                      "`docker logs`, read through the socket"]
            if c.socket != DEFAULT_SOCKET:
                lines += [f"      docker_socket: {c.socket}"]
        else:
            lines += ["    # logs: no container found for this server; to read crash lines add",
                      "    #   files: [/var/log/vllm.log]   or   journal: [vllm.service]"]
    return "\n".join(lines) + "\n"


def _said(look: ServerLook) -> str:
    if not look.answered:
        return f"{look.url} did not answer with vLLM metrics when init looked"
    bits = [f"vLLM {look.version or '(version unknown)'}", f"model {look.model or '?'}",
            f"{sum(m.startswith('vllm:') for m in look.metrics)} vllm: metrics",
            f"accelerator {look.accelerator}"]
    if look.container is not None:
        bits.append(f"container {look.container.name} ({look.container.image})")
    if look.legacy_metrics:
        bits.append("pre-0.9 metric names (the shipped rules read both)")
    return ", ".join(bits)


def _receivers(opts: InitOptions) -> str:
    if opts.webhook_env is None:
        return """\
# No receiver yet: incidents are on the web page and in `sentinel incidents list` only.
# To be paged, add one (Alertmanager's webhook payload), e.g.
# receivers:
#   - name: oncall
#     webhook: {url: ${ONCALL_WEBHOOK_URL}}
# notify:
#   route:
#     receiver: oncall
#     matchers: ['severity="critical"']   # warnings stay on the page and the timeline
"""
    return f"""\
receivers:
  - name: oncall
    webhook:
      url: ${{{opts.webhook_env}}}   # Alertmanager's webhook payload
notify:
  route:
    receiver: oncall
    group_by: [alertname, target]
    # Only critical alerts page. Warnings (a slow server, a full KV cache, Sentinel's
    # own self-alerts) match no route and stay on the web page and the timeline: add a
    # chat receiver and a route for them to see them there.
    matchers: ['severity="critical"']
"""


def _remediation(looks: Sequence[ServerLook], names: list[str]) -> str:
    acting = [(look, name) for look, name in zip(looks, names, strict=True)
              if look.container is not None]
    if not acting:
        return """\
# remediation: no container was found, so Sentinel tells people and acts on nothing.
# With Docker, a guarded warm restart of a crashed server (docs/concepts/guards.md):
# remediation:
#   policies:
#     - name: restart-crashed-vllm
#       alerts: [VLLMHBMOutOfMemory, VLLMCUDAOutOfMemory, VLLMEngineDead]
#       steps:
#         - docker_restart: {container: vllm}
"""
    lines = ["remediation:",
             "  max_concurrent: 1            # one server restarted at a time, fleet-wide",
             "  policies:"]
    for look, name in acting:
        c = look.container
        assert c is not None
        lines += [f"    - name: restart-{name}",
                  f"      alerts: [{', '.join(CRASH_ALERTS)}]",
                  f"      targets: [{name}]",
                  "      cooldown: 10m",
                  "      max_per_hour: 2           # a third crash in an hour pages instead",
                  "      steps:",
                  f"        - docker_restart: {{container: {c.name}, socket: {c.socket}}}",
                  f"          verify_deadline: {VERIFY_DEADLINE[look.accelerator]}"
                  f"   # {look.accelerator}: time to serve again after a warm restart"]
    return "\n".join(lines) + "\n"
