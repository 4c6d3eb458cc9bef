"""The callables the engine's parts are given, by name (the engine's, pyjobq/engine/scheduler.py).

Runs wherever an engine runs: in the scheduler worker, and in the page (the waiting tab's
request scheduler, the volatile engine, the outbox).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Coroutine, Protocol, Sequence

from ..core.ports import Change, Updated
from ..core.records import JobRecord

#: The engine's one way to the store: one transaction of read-modify-writes; what applied is
#: published, and the pass's view sees what is stored.
Write = Callable[[list[Change]], Awaitable[list[Updated]]]
#: Runs a coroutine as a background task of the engine's (its failure is logged).
Spawn = Callable[[Coroutine[Any, Any, Any]], None]
#: Sends a message to the engine's page, over its link.
Send = Callable[[dict[str, Any]], None]


class Publish(Protocol):
    """Tells every page of records one transaction stored (or, ``deleted=True``, deleted)."""

    def __call__(self, records: Sequence[JobRecord], **extra: Any) -> None: ...
