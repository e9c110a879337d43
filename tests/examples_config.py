"""The shipped example configs (deploy/examples/*.yaml) with their addresses changed, for
bench/examples_e2e.py and tests/test_e2e_examples.py.

Each example is read as shipped; only what points outside this machine changes
(target URLs, the Docker socket, the Kubernetes and Google API endpoints, the receivers'
URLs and keys, the listener, the database, the XLA cache folder). With a `scale` above 1
(the tests), every production clock the cases depend on is divided by it, together:

- the bundled rules' `for`s and range selectors (rules/vllm.yaml through
  sentinel.demo.rules.scaled_rules, so the crash counter's 5-minute window is 5m/scale),
  and rules/sentinel.yaml beside them unchanged;
- the route's `group_wait` (30 s) and `group_interval` (5 min) where the example has a
  route (without one Sentinel's implicit route sends at once), act-first's `grace` (2 min);
- each policy step's `verify_deadline` and `timeout`;

and scrape, evaluation and probe intervals become 1 s (the floor: the scaled windows
stay several evaluations long). Nothing else changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sentinel.config.durations import parse_duration
from sentinel.config.notify import (
    DEFAULT_ACT_FIRST_GRACE_MS,
    DEFAULT_GROUP_INTERVAL_MS,
    DEFAULT_GROUP_WAIT_MS,
)
from sentinel.demo.rules import scaled_rules
from sentinel.paths import bundled_dir

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "deploy" / "examples"
EXAMPLES = ("gpu-fleet", "kubernetes", "minimal", "tpu-v6e")
_OUTSIDE = re.compile(r"10\.0\.\d+\.\d+|\$\{|/var/run/docker\.sock|/dev/shm")


@dataclass
class Addresses:
    """Where this machine's stand-ins listen, by the example's own names."""

    folder: Path
    targets: dict[str, str] = field(default_factory=dict)  # target name → sim URL
    pager: str = ""            # the paging receiver's URL (webhook or PagerDuty events)
    chat: str = ""             # the chat receiver's URL (Slack), where the example has one
    docker_socket: str = ""
    kube_api: str = ""
    google_api: dict[str, str] = field(default_factory=dict)  # "logging"/"tpu" → endpoint
    xla_cache: str = ""
    database: str = ""


def group_interval_s(name: str) -> float:
    """The production group_interval of example `name`'s route (0: no route, the implicit
    one sends at once)."""
    doc = yaml.safe_load((EXAMPLES_DIR / f"{name}.yaml").read_text())
    route = (doc.get("notify") or {}).get("route")
    if route is None:
        return 0.0
    return _ms(route.get("group_interval"), DEFAULT_GROUP_INTERVAL_MS) / 1000


def ms(value: float) -> str:
    """A duration in milliseconds as both Sentinel and Prometheus read it."""
    return f"{max(int(value), 1)}ms"


def example_config(name: str, at: Addresses, scale: int = 1) -> Path:
    """Write example `name` with its addresses changed (and, scale > 1, its clocks divided)
    to at.folder/NAME.yaml; return the path."""
    doc = yaml.safe_load((EXAMPLES_DIR / f"{name}.yaml").read_text())
    doc["listen"] = "127.0.0.1:0"
    doc["database"] = at.database or f"sqlite:///{at.folder / 'sentinel.db'}"
    _targets(doc, at)
    _receivers(doc, at)
    _actions(doc, at)
    if name == "kubernetes":
        doc["api"]["tokens"] = [{**t, "token": f"{t['name']}-token-for-the-test"}
                                for t in doc["api"]["tokens"]]
        for sd in doc["kubernetes_sd"]:
            sd["api"] = {"api_server": at.kube_api}
    if scale > 1:
        _scaled(doc, at.folder, scale)
    text = yaml.safe_dump(doc, sort_keys=False)
    left = _OUTSIDE.search(text)
    assert left is None, f"{name}: an address was left unchanged: {left.group(0)}"
    path = at.folder / f"{name}.yaml"
    path.write_text(text)
    return path


def _targets(doc: dict[str, Any], at: Addresses) -> None:
    for target in doc.get("targets", []):
        target["url"] = at.targets[target["name"]]
        if "xla_cache_path" in target:
            target["xla_cache_path"] = at.xla_cache
        logs = target.get("logs") or {}
        if "docker" in logs:
            logs["docker_socket"] = at.docker_socket
        if "cloud_logging" in logs:
            logs["cloud_logging"].update(api_endpoint=at.google_api["logging"],
                                         credentials="anonymous")
        if "tpu" in target:
            target["tpu"].update(api_endpoint=at.google_api["tpu"], credentials="anonymous")


def _receivers(doc: dict[str, Any], at: Addresses) -> None:
    for receiver in doc.get("receivers", []):
        if "slack" in receiver:
            receiver["slack"]["url"] = at.chat
        if "webhook" in receiver:
            receiver["webhook"]["url"] = at.pager
        if "pagerduty" in receiver:
            receiver["pagerduty"].update(routing_key="test-routing-key", url=at.pager)


def _actions(doc: dict[str, Any], at: Addresses) -> None:
    for policy in (doc.get("remediation") or {}).get("policies", []):
        for step in policy["steps"]:
            if "docker_restart" in step:
                step["docker_restart"]["socket"] = at.docker_socket
            if "kubernetes_pod_restart" in step:
                step["kubernetes_pod_restart"]["api"] = {"api_server": at.kube_api}


def _scaled(doc: dict[str, Any], folder: Path, scale: int) -> None:
    """Divide the clocks the cases depend on by `scale` (see the module's docstring)."""
    rules = scaled_rules(folder / "vllm-scaled.yaml", scale)
    doc["rule_files"] = [str(rules), str(bundled_dir("rules") / "sentinel.yaml")]
    doc.update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s",
               probe_interval="1s")
    for target in doc.get("targets", []):
        target.setdefault("probe", {}).update(timeout="900ms")
    notify = doc.setdefault("notify", {})
    route = notify.get("route")
    if route is not None:  # without one, the implicit route sends at once (0 s, 0 s)
        route.update(group_wait=ms(_ms(route.get("group_wait"), DEFAULT_GROUP_WAIT_MS) / scale),
                     group_interval=ms(_ms(route.get("group_interval"),
                                           DEFAULT_GROUP_INTERVAL_MS) / scale))
    act_first = notify.setdefault("act_first", {})
    act_first["grace"] = ms(_ms(act_first.get("grace"), DEFAULT_ACT_FIRST_GRACE_MS) / scale)
    for policy in (doc.get("remediation") or {}).get("policies", []):
        for step in policy["steps"]:
            for key in ("verify_deadline", "timeout"):
                if key in step:
                    step[key] = ms(parse_duration(step[key]) / scale)


def _ms(value: str | None, default: int) -> int:
    return default if value is None else parse_duration(value)
