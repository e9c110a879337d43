"""What each target runs on (tpu, gpu), and the alert annotations that fit it.

Known from, in order of trust: the target's `accelerator:` key; what vLLM
itself says at start-up ("Automatically detected platform cuda." in its log,
read by the log sources); a `tpu:` section or an `xla_cache_path` on the
target. vLLM's /metrics page names no platform, so the scrape cannot tell.

Rules may carry a runbook per accelerator (`runbook_tpu`, `runbook_gpu`,
likewise `description_*`): an alert of a target whose accelerator is known
gets that text as its `runbook`; the variants never reach a notification.
So a GPU team is never told about XLA graphs, and a TPU team still is.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sentinel.model import Alert, LogEntry, labels_of

TPU, GPU, UNKNOWN = "tpu", "gpu", "unknown"
# vLLM's platform detection at start (vllm/platforms/__init__.py).
_PLATFORM = re.compile(r"Automatically detected platform (\w+)")
_PLATFORMS = {"cuda": GPU, "rocm": GPU, "tpu": TPU}
_VARIANTS = ("runbook", "description")
_SUFFIXES = (f"_{TPU}", f"_{GPU}")


def platform_of(line: str) -> str | None:
    """The accelerator a vLLM start-up line names, if it is one."""
    if "detected platform" not in line:  # the cheap test first: every log line passes here
        return None
    m = _PLATFORM.search(line)
    return _PLATFORMS.get(m.group(1).lower()) if m else None


def fit(annotations: Mapping[str, str], accelerator: str) -> dict[str, str]:
    """Annotations with the accelerator's variants in place of the plain keys."""
    out = {k: v for k, v in annotations.items() if not k.endswith(_SUFFIXES)}
    for key in _VARIANTS:
        variant = annotations.get(f"{key}_{accelerator}")
        if variant:
            out[key] = variant
    return out


class Accelerators:
    """target → accelerator, thread-safe (log polls write, evaluations read)."""

    def __init__(self, configured: Mapping[str, str] | None = None,
                 implied: Mapping[str, str] | None = None) -> None:
        self._configured = {t: a for t, a in (configured or {}).items() if a in (TPU, GPU)}
        self._seen: dict[str, str] = dict(implied or {})
        self._lock = threading.Lock()

    @classmethod
    def from_targets(cls, targets: Iterable[Any]) -> Accelerators:
        """From target configs: their `accelerator:` key; a `tpu:` section or an XLA cache
        path implies a TPU until vLLM says otherwise."""
        configured, implied = {}, {}
        for t in targets:
            name = str(t.name)
            configured[name] = str(getattr(t, "accelerator", "auto"))
            if getattr(t, "tpu", None) is not None or getattr(t, "xla_cache_path", None):
                implied[name] = TPU
        return cls(configured, implied)

    def of(self, target: str) -> str:
        """The target's accelerator, or `unknown`."""
        with self._lock:
            return self._configured.get(target) or self._seen.get(target, UNKNOWN)

    def saw(self, entries: Sequence[LogEntry]) -> None:
        """Learn from vLLM's start-up lines among a poll's entries."""
        for e in entries:
            found = platform_of(e.text)
            if found is not None:
                with self._lock:
                    self._seen[e.target] = found

    def annotate(self, alerts: Sequence[Alert]) -> list[Alert]:
        """Each alert with the runbook (and description) that fits its target's accelerator."""
        out = []
        for a in alerts:
            keys = dict(a.annotations)
            if not any(k.endswith(_SUFFIXES) for k in keys):
                out.append(a)
                continue
            fitted = fit(keys, self.of(dict(a.labels).get("target", "")))
            out.append(dataclasses.replace(a, annotations=labels_of(fitted)))
        return out
