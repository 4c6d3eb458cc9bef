"""The ports through which the core reaches the world.

Each is a Protocol with a written contract; :mod:`pyjobq.memory` holds real
in-memory implementations and :mod:`pyjobq.browser` the IndexedDB, Web Locks,
BroadcastChannel and worker ones. One contract suite (``tests/store_contract.py``)
runs against every store.
"""

from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Collection,
    NamedTuple,
    Protocol,
    Sequence,
    runtime_checkable,
)

# A public path kept (docs/api.md: its home before it joined PyjobqError); pyjobq's own modules
# import it from .errors.
from .errors import LockStolen as LockStolen
from .periodic import Occurrence, Schedule
from .records import JobRecord
from .status import Status
from .view import Entry

if TYPE_CHECKING:
    import asyncio

Message = dict[str, Any]
"""A message on a link or channel: a JSON-like dict with ``v`` and ``type``
(pyjobq/core/messages.py)."""
Unsubscribe = Callable[[], None]
"""What ``subscribe`` returns: call it to stop listening (calling it again does nothing)."""
Release = Callable[[], None]
"""What lets a lock go that :meth:`TakesIfAvailable.take_if_available` took (calling it again does
nothing)."""


class Change(NamedTuple):
    """One read-modify-write of :meth:`Store.update_many`.

    ``apply`` gets the current record and returns its replacement, or None to leave it.
    With ``when``, it is called only if the record's status is one of those.
    """

    job_id: str
    apply: Callable[[JobRecord], JobRecord | None]
    when: Collection[Status] | None = None

    def replacement(self, current: JobRecord) -> JobRecord | None:
        """What this change writes over ``current``; None leaves it (also when its status is
        not one of ``when``, without calling ``apply``). What every store's update runs."""
        if self.when is not None and current.status not in self.when:
            return None
        return self.apply(current)


class Replace:
    """The answer of a :class:`KeyChange` that deletes its record as replaced (:data:`REPLACE`)."""

    def __repr__(self) -> str:
        return "REPLACE"


REPLACE = Replace()
"""What a :class:`KeyChange`'s ``decide`` returns to delete its record as replaced."""


class KeyChange(NamedTuple):
    """One decision of :meth:`Store.update_keyed`: made on the record and the other records of
    its key as stored, in the transaction that writes it.

    ``decide(current, others)`` returns the replacement, :data:`REPLACE` to delete ``current``
    as replaced by a newer job of its key, or None to leave it; it is called only if the
    record's status is one of ``when``. ``others`` is [] for a record without a key.
    """

    job_id: str
    decide: Callable[[JobRecord, Sequence[JobRecord]], "JobRecord | Replace | None"]
    when: Collection[Status]


class KeyUpdated(NamedTuple):
    """What :meth:`Store.update_keyed` did: what each change wrote or left (:class:`Updated`,
    in order; a replaced record's is ``Updated(None, True)``), and the records it deleted as
    replaced, as they were."""

    updated: list["Updated"]
    replaced: list[JobRecord]


class Updated(NamedTuple):
    """What one :class:`Change` did: the record stored afterwards (None: there is none),
    and whether the change was applied."""

    record: JobRecord | None
    applied: bool


class Store(Protocol):
    """Durable job records, keyed on ``id``.

    Every method is one atomic transaction: it either fully applies or raises
    and changes nothing. Records come back as new objects; mutating them changes
    nothing stored. Calls take effect in the order they were made (IndexedDB runs the
    transactions of one object store in the order they were created), but other tasks run
    between two calls: a read-modify-write must be one call (``update_many`` with its
    ``when``, ``delete_many``, ``delete_group``), never a read and then a blind write.
    """

    async def add(self, records: Sequence[JobRecord]) -> list[JobRecord]:
        """Insert all of ``records`` or none. An existing id raises ``KeyError`` naming it.

        Keys that replace: a record with a ``key`` replaces, in this same transaction, every
        *waiting* record of that key (:data:`~pyjobq.core.status.REPLACEABLE`) — ``pending``
        (delayed, or in retry backoff: a debounce wants the latest change, not an older one
        retried) or ``paused`` — which is deleted.
        A running record of the key is left (the new one waits behind it: the view never starts
        a keyed job while another of its key runs), and so are finished ones. Of several records
        of one key in ``records`` only the last is stored. Only a record that waits itself
        replaces: one added as running or finished does not (the rules:
        :mod:`pyjobq.core.store_rules`).

        Returns what was replaced, to be published as deleted with the code ``replaced``: the
        waiting records deleted, as they were, oldest first, then the records of ``records``
        not stored; [] when nothing was (always, for records without a key).
        """

    async def get(self, job_id: str) -> JobRecord | None:
        """The record, or None when there is none."""

    async def update(self, change: Change) -> Updated:
        """One read-modify-write in one transaction: :meth:`update_many` of one change.

        ``change.apply`` gets the current record and returns its replacement, or None to
        leave it; with ``change.when`` it is called only if the record's status is one of
        those. The answer says what is stored afterwards and whether the change applied.
        """

    async def update_many(self, changes: Sequence[Change]) -> list[Updated]:
        """Several read-modify-writes in one transaction, in order; one :class:`Updated` each.

        All of them apply or none (a raise changes nothing). A change whose record is missing,
        foreign (a newer pyjobq's), malformed (failed instead) or outside ``when`` is not
        applied. Group commit: a settle and the next claim of its lane, or the claims of
        every lane, cost one transaction.
        """

    async def update_keyed(self, changes: Sequence[KeyChange]) -> KeyUpdated:
        """Each change decided on its record and on every other record of its key as stored, in
        one transaction (all or none): written, deleted as replaced, or left. A missing,
        foreign or malformed record is left (``Updated(record or None, False)``); a key's
        foreign or malformed records are not among ``others``; a second change of one id is
        not decided (``Updated(None, False)``)."""

    async def update_by_status(self, statuses: Collection[Status],
                               apply: Callable[[JobRecord], JobRecord | None], *,
                               due_after: float | None = None) -> list[Updated]:
        """Change every record whose status is one of ``statuses`` in one transaction: the
        records are read and written there (:meth:`update_many` of a :class:`Change` with
        ``when=statuses`` for each). One :class:`Updated` per record found, oldest first; all
        apply or none. A malformed value is failed, as by every read, and left out.

        ``due_after``: only the records whose ``next_retry_at`` is later than it are read
        (through the ``by_next_retry`` index): the network's return makes waiting jobs due,
        and a backlog already due costs it nothing. A record with no ``next_retry_at`` is not
        read: pyjobq writes none pending, and a pass reads another writer's as due already
        (:func:`pyjobq.core.view.due_at`).

        What ``retry_all`` and suspending a type need: a read of the ids first and a write
        after would miss a change made between them and revive a record a later call ended.
        """

    async def entries(self, ids: Sequence[str] | None = None) -> list[Entry]:
        """What a pass decides on, without payloads (:class:`~pyjobq.core.view.Entry`).

        With no ``ids``: every pending, running and paused record, in one readonly
        transaction. With ``ids``: those of them that exist, whatever their status (a
        finished one tells the view to forget it). Malformed values are failed, as by
        every read, and left out.
        """

    async def delete_many(self, job_ids: Sequence[str],
                          when: Collection[Status] | None = None) -> list[JobRecord]:
        """Delete those of ``job_ids`` that exist, all or none, in one transaction that reads
        what it deletes; returns the records deleted, as they were, in the order of ``job_ids``
        (a malformed value as its failed form). Missing ids are ignored; a record of a newer
        pyjobq (a status this version does not know) is left as it is and not returned. With
        ``when``, only a record whose status is one of those is deleted (the others are left and
        not returned): what a pass replacing an outdated keyed job needs.

        One transaction: a change issued after it finds nothing; one issued before it is
        deleted with it (what a read in one transaction and a delete in another would lose).
        """

    async def delete_group(self, group: str) -> list[JobRecord]:
        """Delete every record of ``group`` in one transaction (as :meth:`delete_many` would
        delete them); returns them as they were, oldest first; [] when none."""

    async def by_status(self, status: str) -> list[JobRecord]:
        """Records with that status, oldest (created_at, id) first; [] when none."""

    async def by_group(self, group: str) -> list[JobRecord]:
        """Records of that group, oldest first; [] when none."""

    async def next_due_at(self, after: float | None = None) -> float | None:
        """The soonest ``next_retry_at`` among the records a pass could claim, or None.

        Those are the records a claim may take once their moment comes: pending
        records, and running records holding a lease (the only running records with a
        ``next_retry_at``), whatever else they hold (a malformed one is failed by the
        read that meets it). No other record's ``next_retry_at`` counts — a finished or
        paused record's, a foreign status's (a newer pyjobq's) — nor a value that is not
        a finite number: a wake armed from the answer is never for work no pass can take.
        Every store answers alike (tests/store_contract.py).

        With ``after``, the smallest one strictly greater than ``after``: the next
        moment something *becomes* due, skipping work already due but waiting on
        something else (its lane, a run lock).
        """

    async def all(self) -> list[JobRecord]:
        """Every record, oldest first."""


class ScheduleStore(Protocol):
    """Stored periodic schedules (pyjobq/core/periodic.py), keyed on ``name``, beside the jobs.

    The same contract as :class:`Store`: every method is one atomic transaction, records come
    back as new objects, calls take effect in the order they were made. A stored value that is
    not a schedule is skipped by every read (and logged); a newer pyjobq's is left as it is.
    Both stores implement it (tests/store_contract.py).
    """

    async def schedules(self) -> list[Schedule]:
        """Every stored schedule, by name; [] when none."""

    async def put_schedule(self, name: str,
                           apply: Callable[[Schedule | None], Schedule | None]) -> Schedule | None:
        """One read-modify-write of schedule ``name``: ``apply`` gets the stored one (None: none)
        and returns what to store, or None to leave it. Returns what is stored afterwards."""

    async def delete_schedule(self, name: str) -> Schedule | None:
        """Delete schedule ``name``; returns it as it was, or None when there was none. Its
        jobs stay (they are jobs like any other)."""

    async def advance_schedule(
            self, name: str,
            decide: Callable[[Schedule, JobRecord | None], Occurrence | None],
    ) -> Occurrence | None:
        """One transaction over the schedules and the jobs: read schedule ``name`` and the job
        of its last occurrence (``last_job_id``; None when it has none or it is gone), call
        ``decide`` with both, and store what it answers — the advanced schedule, and its job
        added (an existing id raises ``KeyError`` and changes nothing). Returns the occurrence
        applied; None when there is no such schedule or ``decide`` answered None.

        This is what makes each slot enqueued once per origin: the decision is taken on what
        this transaction read, so of two tabs deciding on one slot the second finds it
        accounted for.
        """
class Clock(Protocol):
    def now(self) -> float:
        """Milliseconds since the epoch."""

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> "Timer":
        """Run ``callback`` once after ``delay_ms``."""


class Timer(Protocol):
    def cancel(self) -> None: ...


class Channel(Protocol):
    """A BroadcastChannel: a message reaches every *other* subscriber of the name."""

    def post(self, message: Message) -> None: ...

    def subscribe(self, callback: Callable[[Message], None]) -> Unsubscribe: ...

    def ignore_source(self, source: str) -> None:
        """Drop ``job-update``s from ``source`` on arrival, before they are parsed: a page's own
        scheduler's news reaches it over its link, so the channel's copy is only an echo."""

    def close(self) -> None: ...


class Link(Protocol):
    """One end of the executor ↔ scheduler pair (a worker's postMessage)."""

    def send(self, message: Message) -> None: ...

    def subscribe(self, callback: Callable[[Message], None]) -> Unsubscribe: ...


class LockManager(Protocol):
    """navigator.locks."""

    async def request(
        self,
        name: str,
        callback: Callable[[Any], Awaitable[Any]],
        *,
        mode: str = "exclusive",
        if_available: bool = False,
        steal: bool = False,
    ) -> Any:
        """Hold ``name`` while ``callback(lock)`` runs; ``lock`` is None when
        ``if_available`` found it taken. Raises :class:`~pyjobq.errors.LockStolen` when another
        request stole it (the callback keeps running: the holder must stop itself).
        """

    async def held(self) -> dict[str, str]:
        """Lock names currently held, each mapped to ``"exclusive"`` or ``"shared"``."""

    async def waiting(self) -> set[str]:
        """Lock names some context of the origin is waiting for (``navigator.locks.query()``'s
        ``pending``)."""


class LockManagerBase:
    """What pyjobq's own :class:`LockManager` s share (the Web Locks' and the in-memory ones):
    :meth:`request`, its options handed to the ``_request`` each one implements."""

    async def request(
        self,
        name: str,
        callback: Callable[[Any], Awaitable[Any]],
        *,
        mode: str = "exclusive",
        if_available: bool = False,
        steal: bool = False,
    ) -> Any:
        """As :meth:`LockManager.request`."""
        return await self._request(name, callback, mode, if_available, steal)

    async def _request(self, name: str, callback: Callable[[Any], Awaitable[Any]], mode: str,
                       if_available: bool, steal: bool) -> Any:
        raise NotImplementedError


@runtime_checkable
class TakesIfAvailable(Protocol):
    """A :class:`LockManager` with the run locks' one-call request (pyjobq's own all have it; one
    of the application's own may not: its run locks are then asked through ``request``)."""

    def take_if_available(self, name: str) -> "asyncio.Future[Release | None]":
        """Ask for ``name`` exclusively, only if it is free (``ifAvailable``), holding no
        coroutine while it is held: the answer is the :data:`Release` that lets it go, or None
        when it is held already. The run locks ask one or two a job, so a request is one call
        and one answer (in the lock manager's event), where :meth:`request` costs a task for
        itself and one for its callback.

        An answer cancelled before it came (its asker gave up) lets the lock go the moment it
        is granted. An answer that fails is the lock manager's refusal (an opaque origin): the
        request made nothing held.
        """


class Lease(Protocol):
    """The processor lease (spec: "Preventing duplicate execution across tabs").

    Only its holder claims jobs and recovers orphans. Who holds it — the page, which takes
    it back when frozen (:class:`pyjobq.engine.lease.LinkLease`), or the scheduler itself
    (:class:`pyjobq.engine.lease.LockLease`) — and why: pyjobq/engine/lease.py.
    """

    #: False for a lease that is never granted (:class:`pyjobq.engine.lease.NeverLease`): its
    #: scheduler only answers requests, so it has no pass to keep current, no run to drop and
    #: no line to queue in, and hears no channel news.
    can_be_granted: bool

    async def hold(self, callback: Callable[[], Awaitable[None]],
                   on_revoked: Callable[[], None]) -> bool:
        """Wait for the lease, then hold it while ``callback()`` runs.

        ``on_revoked()`` is called, at most once, if the lease is taken away while the
        callback runs: the callback must then stop claiming and return soon. Runs
        already handed to the page carry on (their run locks keep them from being
        recovered). Returns False when the lease was revoked, True otherwise.
        """
