"""`kubernetes_sd:` and the two Kubernetes actions in the config: a full example loads;
mistakes are named by file, line and key, all at once."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from sentinel.config import ConfigError, load_config

FULL = """\
scrape_interval: 10s
kubernetes_sd:
  - name: vllm
    namespaces: [inference]
    label_selector: app.kubernetes.io/name=vllm,leaderworkerset.sigs.k8s.io/worker-index=0
    port: http
    labels: {fleet: gemma4}
    xla_cache_path: /dev/shm/xla_cache
    api: {kubeconfig: /etc/sentinel/kubeconfig, context: prod}
  - name: canary
    label_selector: "tier in (canary, shadow),!disabled"
    port: 8000
    target_name: "{namespace}.{pod}"
    api: {api_server: "http://127.0.0.1:8001"}
remediation:
  policies:
    - name: restart-crashed-pod
      alerts: [VLLMTargetDown]
      steps:
        - kubernetes_pod_restart: {grace_period: 30s}
          timeout: 10m
        - kubernetes_rollout_restart: {kind: StatefulSet, name: "{statefulset}"}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sentinel.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_full_kubernetes_config_loads(tmp_path: Path) -> None:
    c = load_config(write(tmp_path, FULL))
    vllm, canary = c.kubernetes_sd
    assert vllm.namespaces == ("inference",) and vllm.port == "http"
    assert vllm.scrape_interval_ms is None  # the global one applies at discovery
    assert vllm.api.kubeconfig == "/etc/sentinel/kubeconfig"
    assert canary.port == 8000 and canary.namespaces == ()
    restart, rollout = c.remediation.policies[0].steps
    assert restart.kind == "kubernetes_pod_restart"
    assert restart.params.grace_period_ms == 30_000 and not restart.params.allow_last_ready
    assert (restart.params.namespace, restart.params.pod) == ("{namespace}", "{pod}")
    assert rollout.params.kind == "StatefulSet"


def test_a_relative_kubeconfig_is_under_the_config_folder(tmp_path: Path) -> None:
    c = load_config(write(tmp_path, FULL.replace("/etc/sentinel/kubeconfig", "kube/config")))
    assert c.kubernetes_sd[0].api.kubeconfig == str(tmp_path / "kube" / "config")


@pytest.mark.parametrize("line, path, message", [
    ("label_selector: '=x'", "label_selector", "not a label selector requirement: '=x'"),
    ("label_selector: 'app in (a'", "label_selector", "not a label selector requirement"),
    ("port: HTTP_Port", "port", "a container port name"),
    ("port: 70000", "port", "a port number is 1-65535"),
    ("namespaces: [Inference]", "namespaces[0]", "not a namespace name"),
    ("target_name: '{node}'", "target_name", "unknown placeholder {node}"),
    ("target_name: vllm", "target_name", "must contain {pod}"),
    ("labels_selector: a=b", "labels_selector", "unknown key (did you mean label_selector?)"),
    ("api: {api_server: 'http://x:8001', kubeconfig: /k}", "api.api_server",
     "api_server is a plain URL"),
    ("api: {api_server: 'ftp://x'}", "api.api_server", "api_server must start with http"),
    ("scheme: grpc", "scheme", "must be http or https"),
    ("labels: {__x: y}", "labels.__x", "not a valid label name"),
])
def test_sd_mistakes_name_file_line_and_key(tmp_path: Path, line: str, path: str,
                                            message: str) -> None:
    key = line.split(":", 1)[0]
    base = {"name": "vllm", "label_selector": "app=vllm", "port": "http"}
    rows = ["kubernetes_sd:"] + [f"  {'- ' if i == 0 else '  '}{k}: {v}"
                                 for i, (k, v) in enumerate(base.items()) if k != key]
    rows.append(f"    {line}")
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, "\n".join(rows) + "\n"))
    assert f"sentinel.yaml:{len(rows)}: kubernetes_sd[0].{path}: {message}" in str(exc.value)


def test_every_mistake_at_once_and_duplicate_names(tmp_path: Path) -> None:
    text = """\
    kubernetes_sd:
      - name: vllm
        label_selector: app=vllm
        port: http
      - name: vllm
        label_selector: "=x"
        port: 0
    remediation:
      policies:
        - name: p
          alerts: [A]
          steps:
            - kubernetes_pod_restart: {allow_last: true}
            - kubernetes_rollout_restart: {kind: DaemonSet}
    """
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text))
    msg = str(exc.value)
    assert ":5: kubernetes_sd[1].name: duplicate name 'vllm' (also kubernetes_sd[0])" in msg
    assert ":6: kubernetes_sd[1].label_selector:" in msg
    assert ":7: kubernetes_sd[1].port:" in msg
    assert (":13: remediation.policies[0].steps[0].kubernetes_pod_restart.allow_last: "
            "unknown key (did you mean allow_last_ready?)") in msg
    assert ":14: remediation.policies[0].steps[1].kubernetes_rollout_restart.kind: must be one " \
           "of Deployment, StatefulSet" in msg


def test_check_config_shows_the_discoveries(tmp_path: Path) -> None:
    from sentinel.config import config_summary

    summary = config_summary(load_config(write(tmp_path, FULL)))
    assert "kubernetes_sd:\n- name: vllm\n" in summary
    assert "context: prod" in summary and "port: 8000" in summary
