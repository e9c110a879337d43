"""The one error type of the PromQL package."""

from __future__ import annotations


class PromQLError(Exception):
    """A PromQL expression that cannot be compiled or evaluated.

    `position` is the 0-based character offset in the expression text of the
    construct at fault, when known (parse errors and unsupported constructs);
    None for errors found while evaluating (e.g. many-to-many matching).
    """

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.position = position

    def __str__(self) -> str:
        if self.position is None:
            return self.message
        return f"{self.message} (at char {self.position})"
