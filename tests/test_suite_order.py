"""The suite's own scheduling (tests/conftest.py): longest tests first, each paired with a
short one, so xdist's workers start the long waits side by side."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import conftest

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class _Item:
    nodeid: str
    markers: set[str] = field(default_factory=set)

    def get_closest_marker(self, name: str) -> Any:
        return name if name in self.markers else None


def test_longest_first_each_followed_by_a_short_one(monkeypatch) -> None:
    monkeypatch.setattr(conftest, "_durations", lambda: {"t::long": 300.0, "t::mid": 60.0})
    items = [_Item("t::a"), _Item("t::mid"), _Item("t::b"), _Item("t::slow", {"slow"}),
             _Item("t::c"), _Item("t::long"), _Item("t::d")]
    conftest.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    # The measured ones by duration, then an unmeasured `slow` one; the short ones in
    # their collected order, one after each long one, then the rest.
    assert [i.nodeid for i in items] == ["t::long", "t::a", "t::mid", "t::b", "t::slow",
                                         "t::c", "t::d"]


def test_the_durations_file_names_collected_tests() -> None:
    # A renamed test drops silently out of the ordering; keep the file's names real.
    known = conftest._durations()
    assert len(known) >= 20 and max(known.values()) > 100
    for name in known:
        path, test = name.split("::", 1)
        assert f"def {test.split('[', 1)[0]}(" in (ROOT / path).read_text(), name
