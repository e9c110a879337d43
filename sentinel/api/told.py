"""Who was told about an incident, who was not, and why: its timeline read at a glance.

The lines are written where the decisions are made (the sender's NOTIFICATION_SENT,
the dispatcher's mute and time-interval notes, act-first's hold notes, the tracker's
join note); this module only reads them back, as the incident page's "Told" box and
the incident list's one-line marker. Pure: timeline dicts (as `history` returns them)
in, JSON-ready dicts out; each "not told" carries the notice core's `Reason` value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sentinel.incidents.notice.types import Reason

# NotificationKind (sentinel.model) → what a person got.
WHAT = {"firing": "page", "update": "update", "fixed": "fixed", "resolved": "resolved"}


def summary(timeline: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """{"told": [{receiver, got: [{what, at}]}], "not_told": [{receiver, reason, detail, at,
    ended_at}], "marker": {text, at}}, from the timeline in time order."""
    got: dict[str, dict[str, str]] = {}  # receiver -> what -> first time
    failed: dict[tuple[str, str], Mapping[str, Any]] = {}
    open_: dict[tuple[str | None, str], dict[str, Any]] = {}
    not_told: list[dict[str, Any]] = []
    for e in timeline:
        data = e.get("data") or {}
        if e.get("kind") == "notification_sent" and data.get("receiver"):
            what = WHAT.get(str(data.get("kind")), str(data.get("kind")))
            got.setdefault(str(data["receiver"]), {}).setdefault(what, e["at"])
            failed.pop((str(data["receiver"]), what), None)
        elif e.get("kind") == "notification_failed" and data.get("receiver"):
            what = WHAT.get(str(data.get("kind")), str(data.get("kind")))
            if what not in got.get(str(data["receiver"]), {}):
                failed[(str(data["receiver"]), what)] = e
        elif e.get("kind") == "note":
            _note(e, data, open_, not_told)
    for (receiver, what), e in failed.items():
        not_told.append(_entry(receiver, "delivery failed", e, what=what))
    told = [{"receiver": r, "got": [{"what": w, "at": at} for w, at in whats.items()]}
            for r, whats in sorted(got.items())]
    return {"told": told, "not_told": not_told, "marker": marker(told, not_told)}


def _note(e: Mapping[str, Any], data: Mapping[str, Any],
          open_: dict[tuple[str | None, str], dict[str, Any]],
          not_told: list[dict[str, Any]]) -> None:
    """A note that says someone was not told (or that the reason ended)."""
    receiver = data.get("receiver")
    if "muted" in data:  # the dispatcher: silenced or inhibited, or no longer
        reason = (Reason.INHIBITED if data.get("inhibited_by") else Reason.SILENCED
                  ) if data["muted"] else None
        _open_or_end(open_, not_told, receiver, "muted", reason, e)
    elif "route_muted" in data:
        _open_or_end(open_, not_told, receiver, "route_muted",
                     Reason.MUTED_INTERVAL if data["route_muted"] else None, e)
    elif "act_first" in data:
        state = data["act_first"]
        if state == "waiting":
            _open_or_end(open_, not_told, None, "held", Reason.HELD, e)
        elif state in ("paged", "fixed"):
            _open_or_end(open_, not_told, None, "held", None, e)
            if state == "fixed":
                not_told.append(_entry(None, Reason.FIXED, e))
    elif data.get("joined"):
        not_told.append(_entry(None, Reason.JOINED, e))
    elif data.get("acknowledged") and data.get("escalation") is False:
        not_told.append(_entry(None, Reason.ACKNOWLEDGED, e))


def _open_or_end(open_: dict[tuple[str | None, str], dict[str, Any]],
                 not_told: list[dict[str, Any]], receiver: Any, slot: str,
                 reason: Reason | None, e: Mapping[str, Any]) -> None:
    key = (None if receiver is None else str(receiver), slot)
    current = open_.pop(key, None)
    if current is not None:
        current["ended_at"] = e["at"]
    if reason is not None:
        entry = _entry(key[0], reason, e)
        open_[key] = entry
        not_told.append(entry)


def _entry(receiver: str | None, reason: str, e: Mapping[str, Any], what: str | None = None
           ) -> dict[str, Any]:
    return {"receiver": receiver, "reason": str(reason), "detail": str(e.get("message", "")),
            "at": e["at"], "ended_at": None, **({"what": what} if what else {})}


def marker(told: list[dict[str, Any]], not_told: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The list's one line: the first page ("paged pager"), else a fix told, else why
    nobody was paged (the reason still in force, else the latest), else None."""
    firsts = [(g["at"], t["receiver"], g["what"]) for t in told for g in t["got"]
              if g["what"] in ("page", "fixed")]
    for what in ("page", "fixed"):
        hits = sorted(f for f in firsts if f[2] == what)
        if hits:
            at, receiver, _ = hits[0]
            verb = "paged" if what == "page" else "fixed, told"
            return {"text": f"{verb} {receiver}", "at": at, "told": True}
    if not not_told:
        return None
    live = [n for n in not_told if n["ended_at"] is None] or not_told
    n = live[-1]
    return {"text": f"not paged: {n['reason']}", "at": n["at"], "told": False}


def markers(timelines: Mapping[int, Sequence[Mapping[str, Any]]]
            ) -> dict[int, dict[str, Any] | None]:
    """The marker of each incident, from its (notification and note) timeline rows."""
    return {iid: summary(rows)["marker"] for iid, rows in timelines.items()}


__all__ = ["WHAT", "marker", "markers", "summary"]
