"""Is the XLA compilation cache warm? Present and holding at least one file."""

from __future__ import annotations

from sentinel.collect.xla_cache import scan_cache
from sentinel.respond.remediate.base import Check
from sentinel.respond.remediate.guards import Reason

# Enough to tell empty from not; a full walk of a big cache is not needed here.
_MAX_FILES = 1000


def warm_check(path: str, allow_cold: bool, what: str) -> Check:
    """OK when `path` is a non-empty directory, or when a cold restart is allowed."""
    scan = scan_cache(path, max_files=_MAX_FILES)
    data = {"xla_cache_path": path, "cache_present": scan.present, "cache_files": scan.files,
            "warm": scan.present and scan.files > 0}
    if data["warm"]:
        return Check(True, f"{what} (warm: {scan.files} cached files in {path})", data=data)
    state = "missing" if not scan.present else "empty"
    if allow_cold:
        return Check(True, f"{what} (COLD: XLA cache {path} is {state}; recompiling takes "
                     "20+ minutes)", data=data)
    return Check.refuse(Reason.COLD_CACHE, f"XLA cache {path} is {state}: a restart would "
                        "recompile for 20+ minutes; the policy does not allow a cold restart",
                        **data)
