"""Series store: where collected samples wait for the rule engine."""

from sentinel.store.memory import Matcher, MemoryStore, Series, StoreFullError

__all__ = ["MemoryStore", "Matcher", "Series", "StoreFullError"]
