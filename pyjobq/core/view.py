"""The lease holder's view of the queue: what is due per type, what runs, what is paused.

Theory of operation
-------------------
A pass decides from what it sees of the unfinished records: the oldest due job of every idle
type (the lanes), running records nobody runs (recovery), paused records whose yield lock
may be free. Reading that from the store at every look costs three transactions and a walk
over every due record — quadratic in the backlog, twice per job. So the holder of the
processor lease keeps this view instead:

- **built** from the store when the pass takes the lease (:meth:`QueueView.replace`: one
  readonly transaction of :class:`Entry` rows, no payloads);
- **kept current by the holder's own writes** (every record the scheduler stores or deletes
  goes through :meth:`apply` / :meth:`forget`);
- **told by other tabs' news** only which ids to read again: the channel is news, the store
  is the truth, so an id some ``job-update`` names is re-read (:meth:`stale`, one readonly
  transaction for all of them) before the next look decides anything from it;
- **read again whole** before a pass ends on "nothing left" and at
  :data:`~pyjobq.core.messages.RECHECK_MS` while lanes run, so news that never came (a tab
  that crashed before broadcasting) delays work by that much at most and loses none. That is
  the spec's "every look is taken again", kept cheap.

The view only chooses. Every claim, settle, recovery and park is still a read-modify-write
inside its own transaction that checks the record it reads (status, owner), so a stale view
can never claim a deleted or changed record: the write finds it changed and does nothing.

Picks use a list per type, sorted by (created_at, id), and one sorted list of
``(next_retry_at, id)``: the look is O(types), the next wake-up a bisection.

Keys that replace: a keyed job is never picked while a job of its key runs (a running record
in the view, or one of ``exclude``: ours in flight), nor while a newer job of its key exists
(two wait only once an older one fell back to waiting behind the newer — a retry, a recovery,
``retry_job`` — and the pass replaces the older; until then it is never started, not even by a
settle's follow-on). "Newer" is (created_at, id): each engine stamps its own jobs, so two tabs'
jobs of one key filed in one millisecond are ordered by that stamp, not by which the store took
last (a known limit: it needs the earlier job's engine to have stamped ahead of its clock in a
burst, within the millisecond the other tab files). So at most one job of a key runs,
whatever lane each is in; the settle of a keyed run asks for a full look
(pyjobq/engine/settle.py), which starts the key's next job in whichever lane it waits. A waiting
record behind a newer one of its key (:meth:`superseded`) is replaced by the pass's next look.
Per key the view keeps its unfinished records, so the check reads that key's row or two.
"""

from __future__ import annotations

import bisect
from typing import Collection, Iterable, Literal, NamedTuple

from .records import JobRecord
from .status import REPLACEABLE, UNFINISHED, Status


class Entry(NamedTuple):
    """What a pass reads of one unfinished record: every field it decides on, no payload."""

    id: str
    type: str
    status: Status
    created_at: float
    #: Set on pending records, and on running ones whose claim is a lease (the outbox).
    next_retry_at: float | None = None
    yield_lock: str | None = None
    owner: str | None = None
    updated_at: float = 0.0
    attempts: int = 0
    #: The job's key (keys that replace): a keyed job starts only while no other job of its key
    #: runs and none newer exists (:meth:`QueueView.key_waits`).
    key: str | None = None

    @classmethod
    def of(cls, record: JobRecord) -> "Entry":
        return cls(record.id, record.type, record.status, record.created_at, record.next_retry_at,
                   record.yield_lock, record.owner, record.updated_at, record.attempts,
                   record.key)


class QueueView:
    """The unfinished records of one store, as :class:`Entry` rows (see the module docstring).

    It holds the records whose status is in :data:`~pyjobq.core.status.UNFINISHED`; one that
    leaves those is finished and leaves the view."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        #: Per type: (created_at, id) of its timed records (pending, or a running lease), sorted.
        self._lanes: dict[str, list[tuple[float, str]]] = {}
        #: (next_retry_at, id) of every timed record, sorted: the next wake-up by bisection.
        self._timed: list[tuple[float, str]] = []
        #: Ids some news named since they were last read from the store.
        self._stale: set[str] = set()
        #: The ids of each status (a dict as an ordered set): a look reads only what it needs.
        self._by_status: dict[Status, dict[str, None]] = {s: {} for s in UNFINISHED}
        #: Per key: the ids of its unfinished records, oldest (created_at, id) first.
        self._keys: dict[str, list[tuple[float, str]]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._entries

    def get(self, job_id: str) -> Entry | None:
        return self._entries.get(job_id)

    def snapshot(self) -> dict[str, Entry]:
        """Every entry by id, as a copy (to tell whether a read changed anything)."""
        return dict(self._entries)

    # ------------------------------------------------------------ keeping it current

    def replace(self, entries: Iterable[Entry]) -> None:
        """Everything, as the store has it now (ids named by news are then read, so not stale)."""
        self._entries = {}
        self._lanes = {}
        self._timed = []
        self._stale = set()
        self._by_status = {s: {} for s in UNFINISHED}
        self._keys = {}
        rows = sorted((e for e in entries if e.status in UNFINISHED),
                      key=lambda e: (e.created_at, e.id))
        for entry in rows:
            self._entries[entry.id] = entry
            self._by_status[entry.status][entry.id] = None
            if entry.key is not None:
                self._keys.setdefault(entry.key, []).append((entry.created_at, entry.id))
            if (at := due_at(entry)) is not None:
                self._lanes.setdefault(entry.type, []).append((entry.created_at, entry.id))
                self._timed.append((at, entry.id))
        self._timed.sort()

    def apply(self, record: JobRecord | Entry) -> None:
        """A record as just written or read from the store: kept if unfinished, forgotten if not."""
        entry = record if isinstance(record, Entry) else Entry.of(record)
        self._drop(entry.id)
        self._stale.discard(entry.id)
        if entry.status not in UNFINISHED:
            return
        self._entries[entry.id] = entry
        self._by_status[entry.status][entry.id] = None
        if entry.key is not None:
            bisect.insort(self._keys.setdefault(entry.key, []), (entry.created_at, entry.id))
        if (at := due_at(entry)) is not None:
            bisect.insort(self._lanes.setdefault(entry.type, []), (entry.created_at, entry.id))
            bisect.insort(self._timed, (at, entry.id))

    def forget(self, job_id: str) -> None:
        """The record was deleted (or the store read found none)."""
        self._drop(job_id)
        self._stale.discard(job_id)

    def mark_stale(self, job_id: str) -> None:
        """News named this id: read it again before deciding from it."""
        self._stale.add(job_id)

    def mark_key_stale(self, key: str) -> None:
        """A decision on ``key``'s records found the store disagreeing with this view: read each
        of them again before deciding from them."""
        self._stale.update(job_id for _created, job_id in self._keys.get(key, ()))

    def stale(self) -> list[str]:
        """The ids to read again, and the slate wiped (the caller applies what it reads)."""
        ids, self._stale = sorted(self._stale), set()
        return ids

    def _drop(self, job_id: str) -> None:
        old = self._entries.pop(job_id, None)
        if old is None:
            return
        self._by_status[old.status].pop(job_id, None)
        if old.key is not None:
            _remove(self._keys.get(old.key, []), (old.created_at, old.id))
            if not self._keys.get(old.key, True):
                del self._keys[old.key]
        if (at := due_at(old)) is None:
            return
        _remove(self._lanes.get(old.type, []), (old.created_at, old.id))
        if not self._lanes.get(old.type, True):
            del self._lanes[old.type]
        _remove(self._timed, (at, old.id))

    # ------------------------------------------------------------ what a look reads

    def with_status(self, status: Status) -> list[Entry]:
        """The entries of one status, oldest (created_at, id) first."""
        found = [self._entries[i] for i in self._by_status.get(status, ())]
        found.sort(key=lambda e: (e.created_at, e.id))
        return found

    def oldest_due(self, job_type: str, now: float, exclude: Collection[str] = (), *,
                   leases: bool = False) -> Entry | None:
        """The oldest due record of one type: pending with ``next_retry_at <= now`` or (with
        ``leases``) a running lease that ran out; None when the type has none."""
        for _created, job_id in self._lanes.get(job_type, ()):
            entry = self._entries[job_id]
            at = due_at(entry)
            if job_id in exclude or at is None or at > now:
                continue
            if entry.key is not None and self.key_waits(entry, exclude):
                continue  # another job of its key runs, or a newer one exists: the lane goes on
            if entry.status is Status.PENDING or (leases and entry.status is Status.RUNNING):
                return entry
        return None

    def key_waits(self, entry: Entry, exclude: Collection[str] = ()) -> bool:
        """Whether keyed ``entry`` may not start: another job of its key runs (its record
        running, or in ``exclude``: ours in flight), or a newer one exists — ``entry`` is
        outdated, and the pass replaces it (:meth:`superseded`) rather than send it."""
        for created_at, job_id in self._keys.get(entry.key or "", ()):
            if job_id == entry.id:
                continue
            other = self._entries[job_id]
            if job_id in exclude or other.status is Status.RUNNING \
                    or (created_at, job_id) > (entry.created_at, entry.id):
                return True
        return False

    def superseded(self) -> list[Entry]:
        """Waiting keyed records (pending or paused) with a newer unfinished record of their
        key: outdated, to be replaced. ``Store.add`` replaces what waits when a new job comes;
        this is what became waiting *behind* a newer one afterwards — a keyed run that settled
        back to pending (retry backoff, a 401, offline, interrupted), a running record
        recovered, a failed one revived by ``retry_job`` — and what a view learnt late."""
        found = []
        for rows in self._keys.values():
            if len(rows) < 2:
                continue
            for _created, job_id in rows[:-1]:  # every one but the newest
                entry = self._entries[job_id]
                if entry.status in REPLACEABLE:
                    found.append(entry)
        found.sort(key=lambda e: (e.created_at, e.id))
        return found

    def keyed(self, key: str) -> list[Entry]:
        """The unfinished records of ``key``, oldest first."""
        return [self._entries[job_id] for _created, job_id in self._keys.get(key, ())]

    def picks(self, now: float, busy_types: Collection[str], exclude: Collection[str] = (), *,
              leases: bool = False, lanes: Literal["type", "fifo"] = "type") -> list[Entry]:
        """What a look starts, oldest first.

        ``lanes="type"``: the oldest due record of every type not in ``busy_types``. ``"fifo"``
        (the outbox): the one oldest due record of any type, and nothing while anything is
        busy — one at a time, so a later entry never reaches the server before an earlier one.
        """
        if lanes == "fifo":
            if busy_types:
                return []
            oldest = self.oldest_due_any(now, exclude, leases=leases)
            return [] if oldest is None else [oldest]
        found = [e for t in self._lanes if t not in busy_types
                 if (e := self.oldest_due(t, now, exclude, leases=leases)) is not None]
        # Two picks never share a key: of two waiting jobs of one key the older waits (key_waits).
        found.sort(key=lambda e: (e.created_at, e.id))
        return found

    def oldest_due_any(self, now: float, exclude: Collection[str] = (), *,
                       leases: bool = False) -> Entry | None:
        """The oldest due record of any type, by (created_at, id); None when nothing is due."""
        heads = [e for t in self._lanes
                 if (e := self.oldest_due(t, now, exclude, leases=leases)) is not None]
        return min(heads, key=lambda e: (e.created_at, e.id), default=None)

    def follow_on(self, job_type: str, now: float, exclude: Collection[str] = (), *,
                  leases: bool = False, lanes: Literal["type", "fifo"] = "type") -> Entry | None:
        """What a settling run of ``job_type`` hands over to in its own transaction: its lane's
        oldest due record, or (``"fifo"``) the oldest due record of any type."""
        if lanes == "fifo":
            return self.oldest_due_any(now, exclude, leases=leases)
        return self.oldest_due(job_type, now, exclude, leases=leases)

    def next_due_at(self, after: float | None = None) -> float | None:
        """The smallest ``next_retry_at`` (strictly greater than ``after``, when given), or None."""
        i = 0 if after is None else bisect.bisect_right(self._timed, (after, "\U0010ffff"))
        return self._timed[i][0] if i < len(self._timed) else None


#: When a pending record with no ``next_retry_at`` is due (:func:`due_at`): always.
DUE_ALWAYS = 0.0


def due_at(entry: Entry) -> float | None:
    """When a pass may start ``entry``: its ``next_retry_at``; a pending record without one is
    due already (:data:`DUE_ALWAYS`). pyjobq stores no pending record without a time, but other
    code (or an older pyjobq) may have: read as due, it runs, where a pass that skipped it would
    leave it pending for ever, and the claim stores it with the claim's own fields. Not its
    ``updated_at``: another writer's clock may be ahead, and no timer would wake for it."""
    if entry.next_retry_at is not None:
        return entry.next_retry_at
    return DUE_ALWAYS if entry.status is Status.PENDING else None


def _remove(rows: list[tuple[float, str]], row: tuple[float, str]) -> None:
    i = bisect.bisect_left(rows, row)
    if i < len(rows) and rows[i] == row:
        del rows[i]
