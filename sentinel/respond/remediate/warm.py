"""What a restart will find: the accelerator, and whether what makes it warm is there.

TPU: the XLA compilation cache (`VLLM_XLA_CACHE_PATH`) holding files. GPU:
the `torch.compile` cache (`VLLM_CACHE_ROOT`, default `~/.cache/vllm`) and
the weights on local disk (`HF_HOME`/`HF_HUB_CACHE`), where Sentinel can see
them through the container's mounts. The accelerator comes from the
container's environment and devices (TPU_*/PJRT_DEVICE, /dev/vfio, /dev/accel;
NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES, `--gpus`, /dev/nvidia*, /dev/kfd)
or from the target's `accelerator:` key where nothing tells. vLLM's own
`/metrics` carries no platform label (`vllm:cache_config_info` holds the
cache settings only), so the page is no help here.

These functions only describe; `restart_cost.judge` decides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sentinel.collect.xla_cache import scan_cache
from sentinel.respond.remediate.base import Check
from sentinel.respond.remediate.guards import Reason
from sentinel.respond.remediate.restart_cost import (
    GPU,
    KEY_ACCELERATOR,
    KEY_WARM,
    KEY_WHY,
    TPU,
    UNKNOWN,
)

# Enough to tell empty from not; a full walk of a big cache is not needed here.
_MAX_FILES = 1000
XLA_ENV = "VLLM_XLA_CACHE_PATH"
_TPU_ENV = ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID", "TPU_CHIPS_PER_HOST_BOUNDS")
_GPU_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
            "ROCR_VISIBLE_DEVICES")
DEFAULT_VLLM_CACHE_ROOT = "/root/.cache/vllm"


def accelerator_of(env: Mapping[str, str], devices: tuple[str, ...] = (), gpus: bool = False,
                   image: str = "", configured: str = "auto") -> tuple[str, str]:
    """(accelerator, what told): the `accelerator:` key when set, else env, devices, image."""
    if configured in (TPU, GPU):
        return configured, "the target's accelerator key"
    if XLA_ENV in env or any(k in env for k in _TPU_ENV) or env.get("PJRT_DEVICE") == "TPU":
        return TPU, "the container's environment"
    if any(d.startswith(("/dev/vfio", "/dev/accel")) for d in devices):
        return TPU, "the container's devices"
    if gpus or any(env.get(k) not in (None, "", "void", "none") for k in _GPU_ENV):
        return GPU, "the container's GPU request or environment"
    if any(d.startswith(("/dev/nvidia", "/dev/kfd", "/dev/dri")) for d in devices):
        return GPU, "the container's devices"
    if "tpu" in image.lower():
        return TPU, "the container's image"
    return UNKNOWN, "nothing (set the target's accelerator: key)"


def facts(accelerator: str, warm: bool | None, why: str, **data: Any) -> dict[str, Any]:
    """An action check's data with the warmth keys `restart_cost.Warmth.of` reads."""
    return {KEY_ACCELERATOR: accelerator, KEY_WARM: warm, KEY_WHY: why, **data}


def xla_facts(path: str | None) -> dict[str, Any]:
    """TPU: warm when the XLA cache directory holds files; cold when missing or empty."""
    if not path:
        return facts(TPU, False, f"{XLA_ENV} is not set: every start compiles the XLA graphs")
    scan = scan_cache(path, max_files=_MAX_FILES)
    warm = scan.present and scan.files > 0
    state = f"holds {_files(scan.files)}" if warm else ("is missing" if not scan.present
                                                      else "is empty")
    return facts(TPU, warm, f"XLA cache {path} {state}", xla_cache_path=path,
                 cache_present=scan.present, cache_files=scan.files)


def gpu_facts(env: Mapping[str, str], host_path: Callable[[str], str | None]) -> dict[str, Any]:
    """GPU: warm when the torch.compile cache holds files; cold when it is seen empty;
    unknown when it is not where Sentinel can look. `host_path` maps a container path
    to the host (None: not mounted, not visible)."""
    root = env.get("VLLM_CACHE_ROOT") or DEFAULT_VLLM_CACHE_ROOT
    seen = host_path(root)
    notes = []
    weights = env.get("HF_HUB_CACHE") or env.get("HF_HOME")
    if weights:
        wpath = host_path(weights)
        if wpath is not None:
            w = scan_cache(wpath, max_files=_MAX_FILES)
            notes.append(f"weights {'local' if w.files else 'NOT local (downloaded again)'} "
                         f"in {weights}")
    if seen is None:
        why = f"torch.compile cache {root} is not visible to Sentinel"
        return facts(GPU, None, "; ".join([why, *notes]), compile_cache=root)
    scan = scan_cache(seen, max_files=_MAX_FILES)
    warm = scan.present and scan.files > 0
    held = f"holds {_files(scan.files)}" if warm else "is empty"
    why = f"torch.compile cache {root} {held}"
    if notes and "NOT local" in notes[0]:
        warm = False
    return facts(GPU, warm, "; ".join([why, *notes]), compile_cache=root,
                 cache_files=scan.files)


def _files(n: int) -> str:
    return f"{n}{'+' if n >= _MAX_FILES else ''} file{'' if n == 1 else 's'}"


def warm_check(path: str, allow_cold: bool, what: str) -> Check:
    """xla_cache_backup's check: OK when `path` holds files (a copy of nothing is refused)."""
    data = xla_facts(path)
    if data[KEY_WARM]:
        return Check(True, f"{what} (warm: {data[KEY_WHY]})", data=data)
    if allow_cold:
        return Check(True, f"{what} (COLD: {data[KEY_WHY]})", data=data)
    return Check.refuse(Reason.COLD_CACHE, f"{data[KEY_WHY]}: nothing to copy", **data)
