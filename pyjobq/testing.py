"""Helpers for testing code that uses pyjobq on plain CPython."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Response:
    """A stand-in for a fetch ``Response`` that a CPython transport can return."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    async def text(self) -> str:
        if self.body is None:
            return ""
        return self.body if isinstance(self.body, str) else json.dumps(self.body)
