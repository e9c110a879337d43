"""Series store: where collected samples wait for the rule engine."""

from sentinel.store.memory import Matcher, MemoryStore, Series, SeriesFilter, StoreFullError

__all__ = ["MemoryStore", "Matcher", "Series", "SeriesFilter", "StoreFullError"]
