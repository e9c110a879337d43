"""Errors the API turns into JSON responses: a status, a message, the parameter at fault."""

from __future__ import annotations


class ApiError(Exception):
    """A request the API refuses: `status` (400, 401, 403, 404, 409), the message, the parameter."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, object]:
        """The JSON body: {"status": "error", "error": message, "param": name}."""
        out: dict[str, object] = {"status": "error", "error": self.message}
        if self.param is not None:
            out["param"] = self.param
        return out


def bad_param(name: str, why: str) -> ApiError:
    """400 naming the parameter."""
    return ApiError(400, f"bad parameter {name!r}: {why}", name)
