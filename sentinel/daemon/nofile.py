"""Open-file descriptors: raise the soft limit at start, and warn when it is too low.

Probing and scraping hold about two sockets per target (issue 40: ≈ 10,000 at
5,000 targets), and the default soft `ulimit -n` of a shell, a systemd unit or
a container is often 1,024. At start Sentinel raises its soft RLIMIT_NOFILE to
the hard limit (as Prometheus and most servers do) and says when even that is
below what the configured targets need.

The raise goes through prlimit64 (`resource.prlimit`), which systemd's
@system-service filter allows; the shipped unit denies @resources, which holds
the older setrlimit. The unit sets LimitNOFILE=65536 (soft = hard) anyway.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

SOCKETS_PER_TARGET = 2  # one for the scrape, one for the probe (kept alive)
# The rest: database, listeners, the remote backend, receivers, the model, log files.
MARGIN = 256
# With an infinite hard limit, the kernel still caps at fs.nr_open (default 1,048,576).
INFINITE_CAP = 1_048_576


def needed(targets: int) -> int:
    """Descriptors Sentinel needs for `targets` targets (scrapes and probes plus a margin)."""
    return SOCKETS_PER_TARGET * targets + MARGIN


def too_low(limit: int, targets: int) -> str | None:
    """The start-up warning when `limit` descriptors are too few for `targets`; else None."""
    want = needed(targets)
    if limit == resource.RLIM_INFINITY or limit >= want:
        return None
    return (f"open-file limit {limit} is below the {want} that {targets} targets need "
            f"(~{SOCKETS_PER_TARGET} sockets each plus {MARGIN}): scrapes and probes will "
            "fail with 'Too many open files'; raise it (systemd: LimitNOFILE=65536; "
            "docker: --ulimit nofile=65536:65536)")


def raise_soft_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = INFINITE_CAP if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            # prlimit64 where there is one (Linux): allowed by systemd's @system-service.
            setter = getattr(resource, "prlimit", None)
            if setter is not None:
                setter(0, resource.RLIMIT_NOFILE, (target, hard))
            else:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.debug("open-file limit raised from %d to %d", soft, target)
            return target
        except (ValueError, OSError) as e:
            log.info("could not raise the open-file limit from %d to %d: %s", soft, target, e)
    return soft


def check_descriptors(targets: int) -> None:
    """At start: raise the soft limit, then warn if it is still too low for `targets`."""
    warning = too_low(raise_soft_limit(), targets)
    if warning:
        log.warning("%s", warning)
