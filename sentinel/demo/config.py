"""The demo's configuration: its targets, two receivers, a warm-restart policy and a model.

    receivers: pager (on-call) and chat (a channel)
    notify.route: everything to the pager, one group per alert and target
    notify.act_first: {grace: 2m, receiver: chat}  (where this Sentinel has it)
    remediation: docker_restart of a crashed server through the simulator's socket
    diagnosis: the model simulator writes the runbook
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sentinel.demo.rules import scaled_rules
from sentinel.paths import bundled_dir

# The demo's serving rules run 4x faster than shipped: a 2 m stall is caught in 30 s.
STALL_SCALE = 4
PAGER, CHAT = "pager", "chat"
CRASH_ALERT = "VLLMHBMOutOfMemory"
# Everything to the pager, one group per alert and target, sent at once (Sentinel's route
# when none is configured; bench/pagestream.py gives Alertmanager the same).
ROUTE_SETTINGS: dict[str, object] = {
    "receiver": PAGER, "group_by": ["alertname", "target"], "group_wait": "0s",
    "group_interval": "1s", "repeat_interval": "4h"}


def act_first_supported() -> bool:
    """Whether this Sentinel's config has `notify.act_first` (issue 33's act-first paging)."""
    from sentinel.config.notify import NotifyConfig

    return any(name == "act_first" or info.alias == "act_first"
               for name, info in NotifyConfig.model_fields.items())


@dataclass(frozen=True)
class DemoTarget:
    """One simulated server Sentinel watches; `log` when Sentinel follows its log file."""

    name: str
    url: str
    log: Path | None = None


def write_demo_config(folder: Path, targets: Sequence[DemoTarget], hooks: dict[str, str],
                      model_url: str | None = None, docker_socket: str | None = None,
                      restart: Sequence[str] = (), rules: Path | None = None,
                      probe: str = "{interval: 2s, timeout: 1s}",
                      route: dict[str, object] | None = None) -> Path:
    """sentinel.yaml in `folder`: the targets, the rules (default: the demo's), `hooks`
    (receiver → URL) and, with a socket, a warm-restart policy for the crash alert on the
    `restart` targets."""
    if rules is None:
        rules = scaled_rules(folder / "rules.yaml", STALL_SCALE, groups={"vllm-serving"})
    self_rules = bundled_dir("rules") / "sentinel.yaml"  # Sentinel's own missed work
    text = (f"database: sqlite:///{folder / 'sentinel.db'}\n"
            "listen: 127.0.0.1:0\n"
            f"rule_files: ['{rules}', '{self_rules}']\n"
            "evaluation_interval: 1s\n"
            "targets:\n" + "".join(_target(t, probe) for t in targets)
            + "receivers:\n" + "".join(f"  - name: {name}\n    webhook: {{url: '{url}'}}\n"
                                       for name, url in hooks.items())
            + _notify(set(hooks), route or ROUTE_SETTINGS))
    if model_url:
        text += ("diagnosis:\n"
                 f"  endpoints: [{{name: gemma-model, url: '{model_url}', timeout: 10s}}]\n"
                 "  interval: 300ms\n  retry: 1s\n  max_tokens: 512\n")
    if docker_socket and restart:
        text += ("remediation:\n  policies:\n"
                 "    - name: warm-restart-crashed-vllm\n"
                 f"      alerts: [{CRASH_ALERT}]\n"
                 f"      targets: [{', '.join(restart)}]\n"
                 "      cooldown: 5m\n"
                 "      allow_cold: false   # a cold restart recompiles for 20+ minutes\n"
                 "      steps:\n"
                 f"        - docker_restart: {{container: '{{target}}', socket: '{docker_socket}',"
                 " settle: 200ms}\n"
                 "          timeout: 30s\n          verify_deadline: 20s\n")
    path = folder / "sentinel.yaml"
    path.write_text(text)
    return path


def _target(t: DemoTarget, probe: str) -> str:
    text = (f"  - name: {t.name}\n"
            f"    url: {t.url}\n"
            "    scrape_interval: 1s\n"
            "    scrape_timeout: 900ms\n"
            "    labels: {cluster: demo}\n"
            f"    probe: {probe}\n")
    if t.log is not None:
        text += f"    logs: {{files: ['{t.log}'], poll_interval: 200ms}}\n"
    return text


def _notify(receivers: set[str], route: dict[str, object]) -> str:
    text = "notify:\n  interval: 200ms\n"
    if PAGER in receivers:
        text += f"  route: {json.dumps(route)}\n"  # JSON is YAML
    if CHAT in receivers and act_first_supported():
        # Act first, then tell once (issue 33): while the policy acts, the page waits (at
        # most 2 m); a verified fix is told to the chat, not the pager.
        text += f"  act_first: {{grace: 2m, receiver: {CHAT}}}\n"
    return text
