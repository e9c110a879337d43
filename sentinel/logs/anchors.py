"""Literal anchors for the signature prefilter: few, long substrings every match must contain.

Matching a regular expression on every line is what makes log scanning slow
in Python; `str.find` of a long literal over a whole chunk runs at gigabytes
per second. So each pattern's *required literals* (the literal runs outside
any group, repeat or alternative, which every match must contain) are
extracted with the regex parser, and a small set of anchors is chosen so that
every pattern has a required literal containing one anchor. A line without
any anchor cannot match any pattern; only lines with one are tried against
the combined regex.

Fewer anchors means fewer passes over the text, longer anchors mean faster
passes and fewer false candidates; the choice is a weighted greedy set
cover over substrings of the required literals, each weighted by the
estimated cost of its pass (`pass_cost`).
"""

from __future__ import annotations

import re
from functools import lru_cache

try:  # Python 3.11+: the parser moved; sre_parse still works but warns.
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

MIN_ANCHOR = 4  # shorter anchors hit too many healthy lines to be worth a pass
# Where a required literal is this long, shorter substrings of it are not offered:
# a 4-character anchor shared by several patterns ("ess ") is cheap to cover with
# but hits healthy lines everywhere, and every hit costs a regex run.
PREFERRED_ANCHOR = 6
# Typical healthy serving lines: an anchor found here would make every such
# line a candidate, so substrings occurring in it are avoided when possible.
_HEALTHY = "\n".join([
    "(APIServer pid=1) INFO 05-12 01:48:42 [loggers.py:123] Engine 000: Avg prompt throughput: "
    "1234.5 tokens/s, Avg generation throughput: 456.7 tokens/s, Running: 12 reqs, Waiting: 0 "
    "reqs, GPU KV cache usage: 12.3%, Prefix cache hit rate: 45.6%",
    '(APIServer pid=1) INFO:     10.1.6.81:16983 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "INFO 02-18 04:51:48 worker.py:266] the current vLLM instance can use total_gpu_memory "
    "(23.55GiB) x gpu_memory_utilization (0.96) = 22.61GiB; model weights take 6.02GiB; "
    "non_torch_memory takes 0.10GiB; the rest of the memory reserved for KV Cache is 14.54GiB.",
    "(EngineCore_DP0 pid=2982916) INFO 10-20 00:02:33 [tpu_worker_jax.py:166] Memory statistics "
    "| total_hbm_limit_gb=30.75GiB | total_hbm_used_gb=1.11GiB | total_hbm_avail_gb=26.56GiB",
    "INFO 12-12 11:19:10 tpu_model_runner.py:274] Compiling the model with different input "
    "shapes... Loading model weights took 9.54 GB; Added request chatcmpl-573665c; Finished "
    "request; the maximum number of tokens to allocate for the process; Received request",
])
_MAX_ANCHOR = 48  # longer candidates barely speed a pass and cost set-cover time


class AnchorError(ValueError):
    """A pattern has no literal long enough to anchor the prefilter."""


def required_literals(pattern: str) -> list[list[str]]:
    """For each top-level alternative of `pattern`, the literal runs every match must contain.

    Raises AnchorError for case-insensitive patterns (a literal search cannot
    honour them) and re.error for invalid ones.
    """
    parsed = sre_parse.parse(pattern)
    if parsed.state.flags & re.IGNORECASE:
        raise AnchorError("case-insensitive patterns cannot be prefiltered; spell both cases")
    data = list(parsed.data)
    if len(data) == 1 and data[0][0] is sre_constants.BRANCH:
        alternatives = [list(branch.data) for branch in data[0][1][1]]
    else:
        alternatives = [data]
    return [_runs(alt) for alt in alternatives]


def _runs(items: list[tuple[object, object]]) -> list[str]:
    """Maximal runs of consecutive LITERAL items (anything else breaks a run)."""
    runs: list[str] = []
    current: list[str] = []
    for op, arg in items:
        if op is sre_constants.LITERAL:
            current.append(chr(arg))  # type: ignore[arg-type]
            continue
        if current:
            runs.append("".join(current))
            current = []
    if current:
        runs.append("".join(current))
    return runs


def pattern_units(pattern: str) -> list[list[str]]:
    """Required literals per alternative, keeping only runs of at least MIN_ANCHOR chars.

    Raises AnchorError naming the alternative that has none.
    """
    units = []
    for runs in required_literals(pattern):
        long_runs = [r for r in runs if len(r) >= MIN_ANCHOR]
        if not long_runs:
            raise AnchorError(
                f"needs a literal of at least {MIN_ANCHOR} characters outside groups and "
                "repeats (the prefilter searches for it)"
            )
        units.append(long_runs)
    return units


def pass_cost(anchor: str) -> float:
    """Estimated cost of one `str.find` pass for `anchor`, in steps per character of text.

    CPython's search (stringlib fastsearch, Horspool with a 64-bit bloom filter
    of the needle's characters by `ord(c) & 63`) skips len+1 characters when
    the character after the window is not in the filter, else one. So long
    anchors of characters rare in healthy logs (capitals, `_`) make fast
    passes; short lowercase ones are three to four times slower. Measured on
    a 129 MB serving log, this estimate tracks real pass times within ~20 %.
    """
    bits = {ord(c) & 63 for c in anchor}
    p = sum(_BLOOM_FREQ[b] for b in bits)
    return 1.0 / ((1.0 - p) * (len(anchor) + 1) + p)


def _bloom_frequencies(text: str) -> list[float]:
    counts = [0] * 64
    for ch in text:
        counts[ord(ch) & 63] += 1
    return [c / len(text) for c in counts]


_BLOOM_FREQ = _bloom_frequencies(_HEALTHY)


@lru_cache(maxsize=32)
def choose_anchors(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """A cheap set of literals such that every alternative of every pattern contains one.

    Weighted greedy set cover over substrings (MIN_ANCHOR.._MAX_ANCHOR chars)
    of the required literals, skipping substrings found in healthy lines when
    possible: take the substring with the lowest `pass_cost` per newly
    covered alternative, then drop anchors made redundant by later picks.
    Every alternative keeps a chosen anchor inside one of its required
    literals, so a line without any anchor cannot match. Raises AnchorError.
    """
    units: list[list[str]] = []
    for pattern in patterns:
        units.extend(pattern_units(pattern))
    cover: dict[str, set[int]] = {}
    for index, runs in enumerate(units):
        for run in runs:
            for size in range(max(MIN_ANCHOR, min(len(run), PREFERRED_ANCHOR)),
                              min(len(run), _MAX_ANCHOR) + 1):
                for start in range(len(run) - size + 1):
                    cover.setdefault(run[start:start + size], set()).add(index)
    rare = {s: units for s, units in cover.items() if s not in _HEALTHY}
    for index in range(len(units)):  # keep a unit coverable even if all its literals are common
        if not any(index in u for u in rare.values()):
            rare.update({s: u for s, u in cover.items() if index in u})
    cover = rare
    uncovered = set(range(len(units)))
    anchors: list[str] = []
    while uncovered:
        best = min((s for s in cover if cover[s] & uncovered),
                   key=lambda s: (pass_cost(s) / len(cover[s] & uncovered), s))
        anchors.append(best)
        uncovered -= cover[best]
    for anchor in sorted(anchors, key=pass_cost, reverse=True):  # costliest first
        rest = [a for a in anchors if a != anchor]
        if set().union(*(cover[a] for a in rest)) >= set(range(len(units))):
            anchors = rest
    return tuple(sorted(anchors))
