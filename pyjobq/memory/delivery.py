"""What the in-memory channels and links share: structured copies and ordered subscribers."""

from __future__ import annotations

import json
from typing import Any, Callable

from ..core.ports import Message, Unsubscribe


def structured_copy(value: Any) -> Any:
    """A structured copy, as postMessage and IndexedDB make (JSON-like values only)."""
    return json.loads(json.dumps(value))


class Listeners:
    """What a channel's end and a link's end share: their subscribers, called in order, and
    what arrives at the end, which :meth:`_receive` takes in."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[Message], None]] = []

    def subscribe(self, callback: Callable[[Message], None]) -> Unsubscribe:
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback) if callback in self._listeners else None

    def deliver(self, message: Message) -> None:
        """Hand on a message that arrived before anyone listened here (a worker's bootstrap kept
        it: ``worker.mjs``), as if it arrived now."""
        self._receive(message)

    def _receive(self, message: Message) -> None:
        """A message arrived at this end: hand it to the subscribers, unless the end drops it."""
        raise NotImplementedError

    def _notify(self, message: Message) -> None:
        for listener in list(self._listeners):
            listener(message)
