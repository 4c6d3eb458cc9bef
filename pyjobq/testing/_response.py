"""A fetch ``Response`` stand-in for CPython transports."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Response"]


@dataclass
class Response:
    """A stand-in for a fetch ``Response`` that a CPython transport can return.

    ``body`` is returned by :meth:`text` as is when a string, else as JSON.
    """

    #: The HTTP status.
    status: int = 200
    #: The body: a string, or a JSON-like value.
    body: Any = None
    #: Response headers.
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True for a 2xx status, as fetch's ``Response.ok``."""
        return 200 <= self.status < 300

    async def text(self) -> str:
        """The body as text: "" for None, the string itself, or JSON."""
        if self.body is None:
            return ""
        return self.body if isinstance(self.body, str) else json.dumps(self.body)
