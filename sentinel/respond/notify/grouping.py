"""When an aggregation group sends, and the key that names each message (pure).

`needs_update` is Alertmanager's DedupStage.needsUpdate: a group sends when
an alert fires that the last message did not announce, when everything the
last message announced resolved, when (with send_resolved) an alert resolved
that was not yet announced resolved, and otherwise once repeat_interval has
passed since the last message. A group that never sent and has only resolved
alerts sends nothing: the receiver never heard of them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection


def needs_update(*, sent_firing: Collection[str], sent_resolved: Collection[str],
                 firing: Collection[str], resolved: Collection[str], send_resolved: bool,
                 last_sent_ms: int | None, now_ms: int, repeat_ms: int) -> bool:
    """Whether the group sends now (fingerprint sets in, one bool out)."""
    if last_sent_ms is None:
        return len(firing) > 0
    if not set(firing) <= set(sent_firing):
        return True
    if not firing:
        return len(sent_firing) > 0
    if send_resolved and not set(resolved) <= set(sent_resolved):
        return True
    return last_sent_ms <= now_ms - repeat_ms


def idempotency_key(group_key: str, group_created_ms: int, seq: int,
                    firing: Collection[str], resolved: Collection[str]) -> str:
    """The key of one message: the same on every attempt to deliver it, different for the next."""
    text = "|".join([group_key, str(group_created_ms), str(seq), ",".join(sorted(firing)),
                     ",".join(sorted(resolved))])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def dedup_key(group_key: str) -> str:
    """A group's stable key for receivers that pair trigger and resolve (PagerDuty's dedup_key)."""
    return hashlib.sha256(group_key.encode()).hexdigest()[:32]
