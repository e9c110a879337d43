"""Fit the evidence into the model's context: measure, and trim by priority until it fits.

The request must never be one the server rejects for length: prompt tokens
(after the chat template) + `max_tokens` ≤ `max_model_len`. Tokens are counted
by the server's /tokenize where it has one, else estimated from UTF-8 bytes
(no tokenizer makes more tokens than bytes, plus a few per message).

Trimming keeps what explains a crash longest: the alert and the static
runbook, then the head and tail of each traceback (the tail holds the
exception), error lines from its middle, then the series values, then the
target's configuration. Repeated lines become one line and a count first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Message = dict[str, str]
Counter = Callable[[Sequence[Message]], int | None]

ESTIMATE_PER_MESSAGE = 8
ESTIMATE_PER_CHAT = 16
# A level is only measured when its text is under this many bytes per token of
# room: log text averages 3-4 bytes a token, so larger text cannot fit.
MAX_BYTES_PER_TOKEN = 6
_ERRORISH = re.compile(r"Error|Exception|RESOURCE_EXHAUSTED|Killed|OOM|out of memory|FATAL",
                       re.IGNORECASE)
_DIGITS = re.compile(r"\d+")


class DoesNotFit(Exception):
    """Even the smallest prompt leaves no room for an answer in max_model_len."""


@dataclass(frozen=True, slots=True)
class Trim:
    """How much of each kind of evidence a prompt keeps."""

    excerpt_lines: int
    excerpts: int
    line_chars: int
    series: bool
    config: bool
    runbook_chars: int


LEVELS = (
    Trim(200, 5, 400, True, True, 4000),
    Trim(100, 5, 400, True, True, 4000),
    Trim(60, 3, 300, True, True, 4000),
    Trim(30, 3, 300, True, True, 2000),
    Trim(16, 2, 200, True, False, 2000),
    Trim(8, 1, 200, False, False, 1200),
    Trim(4, 1, 160, False, False, 600),
    Trim(2, 1, 120, False, False, 300),
    Trim(0, 0, 120, False, False, 200),
)


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A count no tokenizer exceeds: UTF-8 bytes plus template overhead."""
    return ESTIMATE_PER_CHAT + sum(
        ESTIMATE_PER_MESSAGE + len(m["content"].encode()) for m in messages)


def collapse_repeats(lines: Sequence[str]) -> list[str]:
    """Runs of lines that differ only in numbers become the first line and a count;
    exact repeats of earlier lines are dropped and counted at the end."""
    out: list[str] = []
    seen: set[str] = set()
    dropped = 0
    run_key, run = None, 0
    for line in lines:
        key = _DIGITS.sub("0", line)
        if key == run_key:
            run += 1
            continue
        if run:
            out.append(f"[previous line repeated {run} more times]")
        run_key, run = key, 0
        if line in seen and line.strip():
            dropped += 1
            continue
        seen.add(line)
        out.append(line)
    if run:
        out.append(f"[previous line repeated {run} more times]")
    if dropped:
        out.append(f"[{dropped} duplicate lines dropped]")
    return out


def head_and_tail(lines: Sequence[str], keep: int, line_chars: int) -> list[str]:
    """At most `keep` lines (+ markers): the head and the tail, with error lines of the middle."""
    cut = [_cut(line, line_chars) for line in lines]
    if len(cut) <= keep:
        return cut
    if keep <= 0:
        return [f"[{len(cut)} lines omitted]"]
    tail = keep - keep // 3
    head = keep - tail
    middle = cut[head:len(cut) - tail]
    errors = [line for line in middle if _ERRORISH.search(line)][:max(1, keep // 8)]
    omitted = len(middle) - len(errors)
    return [*cut[:head], f"[{omitted} lines omitted]", *errors, *cut[len(cut) - tail:]]


def _cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else f"{line[:limit]}[+{len(line) - limit} chars]"


@dataclass(frozen=True, slots=True)
class Fitted:
    """Messages that fit, their measured prompt tokens, the answer's room, the level used."""

    messages: list[Message]
    prompt_tokens: int
    max_tokens: int
    level: int
    counted_by: str  # "tokenize" or "estimate"


def fit(build: Callable[[Trim], list[Message]], count: Counter, max_model_len: int,
        max_tokens: int, min_answer: int = 64) -> Fitted:
    """The first level whose messages leave `max_tokens` of room; smaller answers last.

    `count` is the server's tokenizer (None when it has none). When even the
    smallest prompt does not leave `max_tokens`, the answer gets what is left
    if that is at least `min_answer`; else DoesNotFit.
    """
    room = max_model_len - max_tokens
    for i, trim in enumerate(LEVELS):
        messages = build(trim)
        size = sum(len(m["content"].encode()) for m in messages)
        if size > room * MAX_BYTES_PER_TOKEN and i < len(LEVELS) - 1:
            continue
        tokens, how = _measure(messages, count)
        if tokens <= room:
            return Fitted(messages, tokens, max_tokens, i, how)
    left = max_model_len - tokens
    if left >= min_answer:
        return Fitted(messages, tokens, left, len(LEVELS) - 1, how)
    raise DoesNotFit(f"the smallest prompt is {tokens} tokens; max_model_len {max_model_len} "
                     f"leaves {left} for the answer")


def _measure(messages: list[Message], count: Counter) -> tuple[int, str]:
    measured = count(messages)
    if measured is None:
        return estimate_tokens(messages), "estimate"
    return measured, "tokenize"
