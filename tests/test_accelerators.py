"""What a target runs on, the runbook that fits it, and `check config --strict` on TPU-only
settings for a GPU target (issue 50)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from sentinel import exitcodes
from sentinel.checks import check_config
from sentinel.collect.accelerators import Accelerators, fit, platform_of
from sentinel.model import Alert, AlertState, LogEntry, labels_of

ROOT = Path(__file__).resolve().parents[1]
# Rules about the TPU itself (its HBM, node, XLA cache) never fire on a GPU.
TPU_RULES = ("HBM", "TPU", "XLA")


@pytest.mark.parametrize(("line", "expected"), [
    ("INFO 12-07 10:00:01 [__init__.py:244] Automatically detected platform cuda.", "gpu"),
    ("INFO 12-07 10:00:01 [__init__.py:244] Automatically detected platform rocm.", "gpu"),
    ("INFO 12-07 10:00:01 [__init__.py:244] Automatically detected platform tpu.", "tpu"),
    ("INFO 12-07 10:00:01 [__init__.py:244] Automatically detected platform cpu.", None),
    ("(APIServer pid=1) INFO:     Started server process [1]", None),
])
def test_the_platform_vllm_names_at_start(line, expected) -> None:
    assert platform_of(line) == expected


def _alert(target: str, **annotations: str) -> Alert:
    return Alert("g", "VLLMEngineDead", labels_of({"alertname": "VLLMEngineDead",
                                                   "target": target}),
                 labels_of(annotations), AlertState.FIRING, 1.0, 0, 0)


def test_an_alert_gets_the_runbook_of_its_targets_accelerator() -> None:
    acc = Accelerators({"gpu-a": "gpu", "x": "auto"}, {"tpu-a": "tpu"})
    acc.saw([LogEntry("gpu-b", "docker:vllm", 0,
                      "INFO 12-07 10:00:01 [__init__.py:244] Automatically detected platform "
                      "cuda.")])
    ann = {"summary": "s", "runbook": "restart it", "runbook_tpu": "warm on the XLA graphs",
           "runbook_gpu": "warm on the torch.compile cache"}
    out = {dict(a.labels)["target"]: dict(a.annotations) for a in acc.annotate(
        [_alert(t, **ann) for t in ("gpu-a", "gpu-b", "tpu-a", "x")])}
    assert out["gpu-a"] == out["gpu-b"] == {"summary": "s",
                                            "runbook": "warm on the torch.compile cache"}
    assert out["tpu-a"]["runbook"] == "warm on the XLA graphs"
    assert out["x"] == {"summary": "s", "runbook": "restart it"}  # unknown: the plain text
    # The configured key beats what a log line says.
    acc.saw([LogEntry("gpu-a", "f", 0, "Automatically detected platform tpu.")])
    assert acc.of("gpu-a") == "gpu"


def test_the_shipped_rules_tell_a_gpu_team_nothing_of_xla() -> None:
    rules = [r for g in yaml.safe_load((ROOT / "rules" / "vllm.yaml").read_text())["groups"]
             for r in g["rules"] if "alert" in r]
    told = {r["alert"]: fit(r.get("annotations", {}), "gpu") for r in rules
            if not any(w in r["alert"] for w in TPU_RULES)}
    assert told
    for alert, fitted in told.items():
        for key, text in fitted.items():
            assert "XLA" not in text and "TPU" not in text, (alert, key, text)
    tpu = {r["alert"]: fit(r.get("annotations", {}), "tpu") for r in rules}
    assert "XLA graphs" in tpu["VLLMEngineDead"]["runbook"]


def _config(tmp_path: Path, extra_target: str = "", step: str = "") -> Path:
    path = tmp_path / "sentinel.yaml"
    path.write_text(f"""\
targets:
  - name: gpu-a
    url: http://127.0.0.1:8000
    accelerator: gpu
{extra_target}
remediation:
  policies:
    - name: restart
      alerts: [VLLMEngineDead]
      steps:
        - docker_restart: {{container: vllm{step}}}
""")
    return path


def test_check_config_strict_flags_a_tpu_only_setting_on_a_gpu_target(tmp_path) -> None:
    path = _config(tmp_path, "    xla_cache_path: /dev/shm/xla",
                   ", restore_from: /mnt/durable/xla")
    out, err = io.StringIO(), io.StringIO()
    assert check_config(str(path), out, err, strict=True, offline=True) == exitcodes.CONFIG
    text = path.read_text().splitlines()
    at = {key: 1 + next(i for i, line in enumerate(text) if key in line)
          for key in ("xla_cache_path", "steps:")}
    lines = [line for line in err.getvalue().splitlines() if "GPU" in line]
    assert len(lines) == 2, err.getvalue()
    assert lines[0].startswith(f"error: {path}:{at['xla_cache_path']}: target gpu-a is a GPU")
    assert "restores an XLA cache" in lines[1]
    assert f"{path}:{at['steps:']}:" in lines[1] or f"{path}:{at['steps:'] + 1}:" in lines[1]
    # Without --strict: warnings, and the config is valid.
    err = io.StringIO()
    assert check_config(str(path), io.StringIO(), err, offline=True) == exitcodes.OK
    assert err.getvalue().count("warning: ") == 2


def test_check_config_strict_passes_a_clean_gpu_config(tmp_path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert check_config(str(_config(tmp_path)), out, err, strict=True,
                        offline=True) == exitcodes.OK, err.getvalue()
