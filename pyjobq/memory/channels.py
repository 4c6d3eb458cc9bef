r"""In-memory ``BroadcastChannel``\ s: :class:`ChannelHub` and its :class:`MemoryChannel` ends
(asynchronous delivery, structured copies, never to the poster itself)."""

from __future__ import annotations

import asyncio

from ..core.ports import (
    Message,
)
from .delivery import Listeners, structured_copy


class ChannelHub:
    """Every :class:`MemoryChannel` of one name hears the others, like a BroadcastChannel."""

    def __init__(self) -> None:
        self._open: list[MemoryChannel] = []

    def channel(self, name: str) -> "MemoryChannel":
        ch = MemoryChannel(self, name)
        self._open.append(ch)
        return ch

    def _deliver(self, sender: "MemoryChannel", message: Message) -> None:
        loop = asyncio.get_running_loop()
        for ch in list(self._open):
            if ch is not sender and ch.name == sender.name:
                loop.call_soon(self._arrive, sender, ch, structured_copy(message))

    @staticmethod
    def _arrive(sender: "MemoryChannel", receiver: "MemoryChannel", message: Message) -> None:
        if sender.dead:
            return  # its context crashed: what it posted and was not yet delivered dies with it
        receiver._receive(message)


class MemoryChannel(Listeners):
    """One context's end of a named in-memory broadcast channel (a ``BroadcastChannel``).

    What one end posts reaches every *other* open end of the same name, in a later task and
    as a copy, never the poster itself — as in the browser. Get one from
    :meth:`ChannelHub.channel`.
    """

    def __init__(self, hub: ChannelHub, name: str) -> None:
        super().__init__()
        self._hub = hub
        self.name = name
        self.closed = False
        #: Its context crashed (:meth:`crash`): messages it posted are no longer delivered.
        self.dead = False
        self._ignored: set[str] = set()

    def ignore_source(self, source: str) -> None:
        """Drop ``job-update``s that ``source`` sent, unread
        (like the browser port's prefix test)."""
        self._ignored.add(source)

    def crash(self) -> None:
        """The context holding this channel died: close it, and drop what it posted in flight."""
        self.dead = True
        self.close()

    def post(self, message: Message) -> None:
        if self.closed:
            raise RuntimeError("InvalidStateError: the channel is closed")
        self._hub._deliver(self, message)

    def _receive(self, message: Message) -> None:
        if self.closed:
            return
        if self._ignored and isinstance(message, dict) and message.get("type") == "job-update" \
                and message.get("source") in self._ignored:
            return
        self._notify(message)

    def close(self) -> None:
        self.closed = True
        if self in self._hub._open:
            self._hub._open.remove(self)
