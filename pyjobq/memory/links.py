"""In-memory worker ↔ page links: :func:`link_pair` and its :class:`MemoryLink` ends."""

from __future__ import annotations

import asyncio

from ..core.ports import (
    Message,
)
from ..loop import soon
from .delivery import Listeners, structured_copy


class MemoryLink(Listeners):
    """One end of a worker ↔ page pair: messages are copied and delivered in a later task.

    ``together``: what this end sends in one step travels together, in order, in one later
    call (the volatile engine's link inside its page: :func:`~pyjobq.loop.soon`, at
    the end of the current event there, where every task is a browser task). Each direction keeps
    its order, as a worker's ``postMessage`` does; between the two directions a worker
    promises no order, and neither does this.
    """

    def __init__(self, *, copy: bool = True, together: bool = False) -> None:
        super().__init__()
        self.peer: MemoryLink | None = None
        self.closed = False
        self._copy = copy
        self._together = together
        self._outgoing: list[Message] = []

    def send(self, message: Message) -> None:
        if self.closed or self.peer is None or self.peer.closed:
            return  # like postMessage to a terminated worker: dropped
        message = structured_copy(message) if self._copy else message
        if not self._together:
            asyncio.get_running_loop().call_soon(self.peer._receive, message)
            return
        if not self._outgoing:
            soon(self._arrive)  # on a page: at the end of this event, not a browser task later
        self._outgoing.append(message)

    def _arrive(self) -> None:
        """Hand the peer what this end sent since the last time, in order."""
        outgoing, self._outgoing = self._outgoing, []
        for message in outgoing:
            if self.peer is not None:
                self.peer._receive(message)

    def _receive(self, message: Message) -> None:
        if self.closed:
            return
        if self.held is not None:  # a frozen context runs no task: the message waits
            self.held.append(message)
            return
        self._notify(message)

    #: Messages waiting while this end's context is frozen (:meth:`freeze`); None when it is not.
    held: list[Message] | None = None

    def freeze(self) -> None:
        """This end's context is frozen: hold what arrives until :meth:`thaw`, in order."""
        if self.held is None:
            self.held = []

    def thaw(self) -> None:
        held, self.held = self.held or [], None
        for message in held:
            self._receive(message)

    def close(self) -> None:
        self.closed = True


def link_pair(*, copy: bool = True) -> tuple[MemoryLink, MemoryLink]:
    """Two linked ends. ``copy=False`` hands messages over as they are (still in a later task):
    for an engine and its page in one Python context (volatile jobs), where a structured copy
    would only cost time; messages are built fresh for each send and never changed after.
    What an end sends in one step then travels together (:class:`MemoryLink`'s ``together``)."""
    a, b = MemoryLink(copy=copy, together=not copy), MemoryLink(copy=copy, together=not copy)
    a.peer, b.peer = b, a
    return a, b
