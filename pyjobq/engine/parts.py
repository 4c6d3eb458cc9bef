"""What the engine's parts are given: the basics every part reads, and the callables, by name.

Runs wherever an engine runs: in the scheduler worker, and in the page (the waiting tab's
request scheduler, the volatile engine, the outbox).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Collection, Coroutine, Mapping, Protocol, Sequence

from ..core.mode import Mode
from ..core.ports import Change, Clock, LockManager, Store, Updated
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


@dataclass(frozen=True)
class EngineBasics:
    """What every part reads of its engine (pyjobq/engine/scheduler.py): mode, identity, ports."""

    mode: Mode
    #: The engine's ``source``: the owner its claims write; only a record it owns is settled.
    source: str
    clock: Clock
    store: Store
    locks: LockManager
    #: Job type -> the yield lock its jobs park under while that lock is held.
    yields: Mapping[str, str]
    #: The suspended types (``suspend_type``): the request table owns them; the parts only read.
    suspended: Collection[str]
