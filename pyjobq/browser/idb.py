"""The IndexedDB store: the one schema module, and the :class:`~pyjobq.core.ports.Store` contract.

Theory of operation
-------------------
An IndexedDB transaction commits as soon as control returns to the event loop
with no request pending, and a Python ``await`` always resumes in a later
macrotask (Pyodide's WebLoop). So no method here awaits inside a transaction:
each issues all of its requests synchronously — or chains the next request
from a request's ``onsuccess`` callback, which runs synchronously in the event —
and then awaits one future resolved by the transaction's ``complete`` (or
rejected by its ``error``/``abort``). Every callback proxy is destroyed once
the transaction has finished.

The two transactions of every job — the enqueue's ``add`` and the settle-and-claim's
``update_many`` — are instead made in one call into ``idb_batch.js``: it issues the reads,
calls Python back (:meth:`_OneCalls._called_back`, one long-lived proxy) in the last
read's success event, and issues the writes Python decided, converted in one ``to_js``; it
calls back once more in the event that ends the transaction, where the awaiting code goes on
(:func:`pyjobq.browser.batching.run_ready`). The decisions stay here; a transaction costs one
call rather than a proxy per request, and no browser task of its own after it ends.

Schema (spec: "The job record"): the application-named database, version 2 — the spec's
version 1 and two additions —, object store ``jobs`` keyed on ``id``, indexes ``by_status``,
``by_group``, ``by_group_status`` (compound) and ``by_next_retry`` (the spec's), and ``by_key``
(keys that replace: ``enqueue_fetch(..., key=)``); and the object store ``schedules``, keyed on
``name``: the periodic schedules (pyjobq/core/periodic.py). ``next_retry_at`` is set only on
pending records, so ``by_next_retry`` lists exactly the waiting work. The upgrade step creates
only what is missing (:func:`upgrade_step`), so a database of version 1 (or none) upgrades in
place; a page of an older pyjobq then holding it at version 1 gets ``versionchange``, stops and
asks for a reload (:class:`IndexedDBStore`).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import math
from typing import Any, Callable, Collection, Mapping, Sequence

import js  # type: ignore[import-not-found]
from pyodide.ffi import jsnull, to_js

from ..core import store_rules as rules
from ..core.errors import DatabaseUpgradedError, StorageError
from ..core.periodic import Occurrence, Schedule
from ..core.ports import Change, KeyChange, KeyUpdated, Updated
from ..core.records import (
    MAX_DEPTH,
    ForeignRecord,
    JobRecord,
    RecordError,
    malformed,
    shallow_json,
)
from ..core.status import CLAIMABLE, KNOWN, REPLACEABLE, UNFINISHED, Status
from ..core.view import Entry
from ..loop import new_future
from . import batching, proxies
from .js_helpers import Helper

log = logging.getLogger("pyjobq")

#: Version 2 adds ``by_key`` (keys that replace) and the ``schedules`` store to the spec's
#: version 1. The upgrade step only adds what is missing (:func:`upgrade_step`).
DB_VERSION = 2
STORE = "jobs"
#: The periodic schedules, keyed on ``name`` (version 2).
SCHEDULES = "schedules"
INDEXES: dict[str, Any] = {
    "by_status": "status",
    "by_group": "group",
    "by_group_status": ["group", "status"],
    "by_next_retry": "next_retry_at",
    # Only keyed records are in it: IndexedDB leaves out a record whose key path is null.
    "by_key": "key",
}


def upgrade_step(db: Any, transaction: Any) -> None:
    """The schema's upgrade step, run in ``upgradeneeded`` whatever version the database was at
    (none, or 1): it adds what is missing and only that (``contains``), so the
    records of a version-1 database stay, and are indexed as they are. Any later version's step
    is written the same way: several additions merge without a step per version."""
    if not db.objectStoreNames.contains(STORE):
        store = db.createObjectStore(STORE, _to_js({"keyPath": "id"}))
    else:
        store = transaction.objectStore(STORE)
    for name, key_path in INDEXES.items():
        if not store.indexNames.contains(name):
            store.createIndex(name, to_js(key_path) if isinstance(key_path, list) else key_path)
    if not db.objectStoreNames.contains(SCHEDULES):
        db.createObjectStore(SCHEDULES, _to_js({"keyPath": "name"}))



def _to_js(value: dict[str, Any]) -> Any:
    return to_js(value, dict_converter=js.Object.fromEntries, create_pyproxies=False)


#: The JavaScript half of a transaction made in one call (``idb_batch.js``: ``update``, ``add``);
#: where it cannot be evaluated the store issues each request from Python
#: (:func:`_update_per_request`), as it always could.
BATCHES = Helper("idb_batch.js", "IndexedDB requests go one by one from Python")


def _update_per_request(t: "_Transaction", changes: Sequence[Change],
                        done: list[Updated]) -> None:
    """``update_many`` without ``idb_batch.js``: every get issued now; in the last one's success
    event (while the transaction is active) :func:`_apply` decides and the writes are issued."""
    values: list[Any] = [None] * len(changes)
    left = [len(changes)]

    def read(i: int, value: Any) -> None:
        values[i] = value
        left[0] -= 1
        if left[0] == 0:
            # No JSON text here: each value is read as itself (""; None where none was read).
            writes = _apply(changes, done, values, [None if v is None else "" for v in values])
            for key in getattr(writes, "del"):
                t.store.delete(key)
            for put in writes.put:
                t.store.put(put)

    for i, change in enumerate(changes):
        t.then(t.store.get(change.job_id), functools.partial(read, i))


def _error(what: str, error: Any) -> StorageError:
    name = getattr(error, "name", None) or "Error"
    message = getattr(error, "message", None) or str(error)
    hint = ""
    if name == "QuotaExceededError":
        hint = (" The browser's storage quota for this origin is full;"
                " delete finished jobs or free space.")
    return StorageError(f"IndexedDB {what} failed: {name}: {message}.{hint}")


class _Transaction:
    """One transaction: requests issued synchronously, one future for its end."""

    def __init__(self, db: Any, mode: str, what: str, scope: Sequence[str] = (STORE,)) -> None:
        self.what = what
        self.tx = db.transaction(scope[0] if len(scope) == 1 else to_js(list(scope)), mode)
        #: The first object store of the scope (``jobs``, unless it is another's alone).
        self.store = self.tx.objectStore(scope[0])
        self.future: asyncio.Future[None] = new_future()
        self._proxies: list[Any] = []
        self.tx.oncomplete = self._proxy(lambda _e: self._finish(None))
        # A request's error bubbles here before the transaction has its own .error set.
        self.tx.onerror = self._proxy(
            lambda e: self._finish(_error(what, e.target.error or self.tx.error)))
        self.tx.onabort = self._proxy(
            lambda _e: self._finish(_error(what, self.tx.error or "aborted")))

    def _proxy(self, fn: Callable[..., Any]) -> Any:
        proxy = proxies.create(fn)
        self._proxies.append(proxy)
        return proxy

    def object_store(self, name: str) -> Any:
        """Another object store of this transaction's scope."""
        return self.tx.objectStore(name)

    def then(self, request: Any, fn: Callable[[Any], None]) -> None:
        """Run ``fn(result)`` synchronously in the request's success event."""

        def on_success(_event: Any) -> None:
            try:
                fn(request.result)
            except BaseException as exc:  # an exception in a callback must abort, not commit half
                self._finish(exc if isinstance(exc, Exception) else StorageError(str(exc)))
                self.tx.abort()

        request.onsuccess = self._proxy(on_success)

    def _finish(self, error: BaseException | None) -> None:
        if not self.future.done():
            if error is None:
                self.future.set_result(None)
            else:
                self.future.set_exception(error)

    def _release(self) -> None:
        # Detached first: an abort that follows an error must find no destroyed listener.
        self.tx.oncomplete = self.tx.onerror = self.tx.onabort = None
        for proxy in self._proxies:
            proxies.destroy(proxy)
        self._proxies = []

    def __await__(self) -> Any:
        # The callbacks have all returned once the awaiting code resumes: their proxies go then
        # (not from inside the callback running, and with no event-loop step of their own).
        try:
            return (yield from self.future.__await__())
        finally:
            self._release()


def _malformed(raw: Any, exc: Exception) -> JobRecord:
    """A stored value that is not a valid job record, as a failed record (see records.malformed)."""
    return malformed(raw, exc, float(js.Date.now()))


def _nulls_to_none(value: Any) -> Any:
    """JavaScript ``null`` arrives from ``to_py`` as ``jsnull``, not None (Pyodide 314): a
    record written by other code (or a body holding null) would otherwise be malformed."""
    if isinstance(value, dict):
        return {k: _nulls_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nulls_to_none(v) for v in value]
    return None if value is jsnull else value


def _decode(value: Any, bad: list[tuple[Any, JobRecord]], *,
            quiet: bool = False) -> JobRecord | None:
    """A stored JS value as a record;
    a malformed one goes to ``bad`` as (its key, its failed record).

    A record with a status this version does not know (a newer pyjobq's) is None and left alone.
    ``quiet``: log nothing (the value was logged when a read first met it).
    """
    try:
        data = _nulls_to_none(value.to_py()) if hasattr(value, "to_py") else value
    except Exception:  # RecursionError, or the JS stack overflowing inside to_py
        # Nested deeper than to_py recurses: read its names only, and fail it keeping those.
        shallow = value.to_py(depth=1) if hasattr(value, "to_py") else {}
        data = {k: v for k, v in shallow.items()
                if isinstance(v, (str, int, float)) and not isinstance(v, bool)}
        exc = RecordError(f"job record {data.get('id')!r} nests deeper than {MAX_DEPTH} levels")
        if not quiet:
            log.error("pyjobq: failing a malformed record in IndexedDB: %s", exc)
        bad.append((data.get("id"), _malformed(data, exc)))
        return None
    return _decode_data(data, bad, quiet=quiet)


def _decode_text(text: str, raw: Any, bad: list[tuple[Any, JobRecord]]) -> JobRecord | None:
    """A stored value as a record, from its JSON text when ``idb_batch.js`` could write one
    (plain JSON values only: ``json.loads`` at C speed, nulls as None, no proxy per value), or
    else (``text`` empty) from the value itself (:func:`_decode`, which fails what is not a
    record)."""
    if text:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            pass
        else:
            return _decode_data(data, bad, shallow=shallow_json(text))
    return _decode(raw, bad)


def _decode_data(data: Any, bad: list[tuple[Any, JobRecord]], *, quiet: bool = False,
                 shallow: bool = False) -> JobRecord | None:
    try:
        return JobRecord.from_dict(data, shallow=shallow)
    except ForeignRecord as exc:
        if not quiet:
            log.info("pyjobq: leaving a record of a newer pyjobq as it is: %s", exc)
        return None
    except RecordError as exc:
        if not quiet:
            log.error("pyjobq: failing a malformed record in IndexedDB: %s", exc)
        bad.append((data.get("id") if isinstance(data, Mapping) else None, _malformed(data, exc)))
        return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _entry(value: Any, key: Any, bad: list[tuple[Any, JobRecord]]) -> Entry | None:
    """A stored value's :class:`Entry`, read field by field through the proxy (the payload
    stays in JavaScript); a value whose fields a pass could not use is decoded whole, so a
    malformed one is failed (into ``bad``) and a foreign one left alone (None)."""
    # A missing property raises AttributeError through the proxy: read with defaults.
    status = getattr(value, "status", None)
    type_ = _text(getattr(value, "type", None))
    created = rules.number(getattr(value, "created_at", None))
    retry = getattr(value, "next_retry_at", None)
    attempts = rules.number(getattr(value, "attempts", None))
    if status in KNOWN and type_ is not None and created is not None and isinstance(key, str) \
            and attempts is not None \
            and (retry is None or retry is jsnull or rules.number(retry) is not None):
        lock, owner = getattr(value, "yield_lock", None), getattr(value, "owner", None)
        job_key = getattr(value, "key", None)
        if job_key is None or job_key is jsnull or _text(job_key):
            return Entry(key, type_, Status(status), created,
                         None if retry is None or retry is jsnull else float(retry),
                         _text(lock), _text(owner),
                         rules.number(getattr(value, "updated_at", None)) or created, int(attempts),
                         _text(job_key))
    record = _decode(value, bad)
    return None if record is None else Entry.of(record)


def _put_failed(store: Any, key: Any, record: JobRecord) -> None:
    if key != record.id and key is not None:
        store.delete(key)  # a non-str key: the failed record is filed under its str form
    store.put(_to_js(record.to_dict()))


def _deletable(value: Any) -> JobRecord | None:
    """What deleting a stored value deletes: its record (a malformed one as its failed form);
    None for no value, or a newer pyjobq's record, which is left as it is."""
    if value is None or value is jsnull:
        return None
    bad: list[tuple[Any, JobRecord]] = []
    record = _decode(value, bad)
    return bad[0][1] if bad else record


def _records(values: Any, bad: list[tuple[Any, JobRecord]]) -> list[JobRecord]:
    return rules.oldest_first(r for r in (_decode(value, bad) for value in values) if r is not None)


def _apply(changes: Sequence[Change], done: list[Updated], values: Any,
           texts: Sequence[str | None], own: _OwnWrites | None = None,
           put_records: list[JobRecord | None] | None = None) -> Any:
    """``update_many``'s decision, made once every read has succeeded, in the transaction: each
    change applied in order — on what an earlier change of the same call wrote to its record —
    into ``done``; returns the writes, converted in one ``to_js``. ``values``: what was read
    (None: no record); ``texts``: each one's JSON text from ``idb_batch.js``, or "" to read the
    value itself, None where there is none. A record read exactly as this store last wrote it
    is that record (``own``), not decoded again; ``put_records`` gets each put's record (None
    for a malformed one failed), for ``own`` once the transaction committed. Without ``own``
    (no texts: :func:`_update_per_request`) nothing is taken on trust, and nothing is kept."""
    kept: list[JobRecord | None] = [] if put_records is None else put_records
    dels: list[Any] = []
    puts: list[dict[str, Any]] = []

    def load(i: int, change: Change) -> JobRecord | Updated:
        text = texts[i]
        if text is None:  # no record: JavaScript's undefined
            return Updated(None, False)
        if own is not None and (mine := own.read(change.job_id, text)) is not None:
            return mine
        bad: list[tuple[Any, JobRecord]] = []
        current = _decode_text(text, values[i] if text == "" else None, bad)
        if bad:  # failed in this same transaction; the change is not applied to it
            key, failed = bad[0]
            if key != failed.id and key is not None:
                dels.append(key)  # a non-str key: the failed record is filed under its str
            puts.append(failed.to_dict())
            kept.append(None)
            return Updated(failed, False)
        # None: a newer pyjobq's record, left exactly as it is.
        return Updated(None, False) if current is None else current

    applied = rules.apply_changes(changes, load)
    done.extend(applied.done)
    for new in applied.writes:
        puts.append(new.to_dict())
        # Kept to be trusted when read back only while unfinished: a settle reads back the claim
        # it stored; a finished record is seldom read by an update again.
        kept.append(None if new.terminal else new)
    keep = [] if put_records is None else [i for i, r in enumerate(kept) if r is not None]
    return to_js({"del": dels, "put": puts, "keep": keep}, dict_converter=js.Object.fromEntries,
                 create_pyproxies=False)


def _changing_step(t: _Transaction, wanted: frozenset[Status],
                   apply: Callable[[JobRecord], JobRecord | None], done: list[Updated], *,
                   by_status: bool) -> Callable[[Any], None]:
    """``update_by_status``'s cursor step: each record of ``wanted`` changed and put from its
    success event, so what is read is what is changed, in this one transaction. A record put
    with another status leaves a status cursor's range; the cursor goes on past it. A cursor
    over another index (``by_status=False``) reads no further than the name of a record of
    another status."""
    seen: set[str] = set()  # a record changed into another of the statuses is met again

    def step(cursor: Any) -> None:
        if not cursor:  # the end: JavaScript null (a falsy JsNull, not None, in newer Pyodide)
            return
        if not by_status and getattr(cursor.value, "status", None) not in wanted:
            cursor.continue_()
            return
        bad: list[tuple[Any, JobRecord]] = []
        current = _decode(cursor.value, bad)
        if bad:  # failed in this same transaction, and left out
            _put_failed(t.store, *bad[0])
        elif current is not None and current.status in wanted and current.id not in seen:
            seen.add(current.id)
            new = apply(current)
            if new is None:
                done.append(Updated(current, False))
            else:
                t.store.put(_to_js(new.to_dict()))
                done.append(Updated(new, True))
        cursor.continue_()  # fires the same request's success event again

    return step


def _add_keyed(t: _Transaction, values: Any, keys: Sequence[str], adding: Collection[str],
               replaced: list[JobRecord]) -> None:
    """``add`` of records with keys, in ``t``: the adds, and, through the ``by_key`` index, the
    deletes of the waiting records of their keys (into ``replaced``).

    The index holds only keyed records (a record whose ``key`` is null is not in it), so
    finding a key's waiting job reads that key's records alone — one live job or two, plus
    the finished ones kept — never the store: a debounced save costs its add and one short
    cursor, in the transaction that stores it (no schema change would find it as cheaply:
    ``by_status`` walks every pending record). The adds go first; the cursors, issued after
    them in the same transaction, see the new records too and step over them (``adding``)."""
    for value in values:
        t.store.add(value)

    def step(cursor: Any) -> None:
        if not cursor:  # the end: JavaScript null (a falsy JsNull, not None, in newer Pyodide)
            return
        status = getattr(cursor.value, "status", None)
        if rules.is_status(status, REPLACEABLE) and cursor.primaryKey not in adding:
            record = _deletable(cursor.value)
            if record is not None and record.status in REPLACEABLE:
                cursor.delete()
                replaced.append(record)
        cursor.continue_()  # fires the same request's success event again

    index = t.store.index("by_key")
    for key in keys:
        t.then(index.openCursor(key), step)


def _update_keyed(t: _Transaction, changes: Sequence[KeyChange], done: list[Updated | None],
                  replaced: list[JobRecord]) -> None:
    """:meth:`IndexedDBStore.update_keyed` in ``t``: each record read, then its key's records
    through the ``by_key`` index from that read's success event, then the decision and its
    write from theirs — decided on what this transaction read. ``done[i]``: what change ``i``
    did; ``replaced``: the records deleted as replaced."""
    taken = rules.Taken()

    def decide(i: int, current: JobRecord, values: Any) -> None:
        others = [r for r in _records(values, []) if r.id != current.id] \
            if values is not None else []
        decision = rules.decide_keyed(changes[i], current, others)
        done[i] = decision.updated
        if decision.gone is not None:
            t.store.delete(decision.gone.id)
            replaced.append(decision.gone)
        if decision.write is not None:
            t.store.put(_to_js(decision.write.to_dict()))

    def read(i: int, value: Any) -> None:
        job_id = changes[i].job_id
        if value is None or value is jsnull or not taken.first(job_id):
            done[i] = Updated(None, False)
            return
        bad: list[tuple[Any, JobRecord]] = []
        current = _decode(value, bad)
        if bad:
            _put_failed(t.store, *bad[0])  # failed in this same transaction, and left
            done[i] = Updated(bad[0][1], False)
        elif current is None:
            done[i] = Updated(None, False)
        elif current.key is None or current.status not in changes[i].when:
            decide(i, current, None)
        else:
            t.then(t.store.index("by_key").getAll(current.key),
                   functools.partial(decide, i, current))

    for i, change in enumerate(changes):
        t.then(t.store.get(change.job_id), functools.partial(read, i))


class _OwnWrites:
    """The records this store wrote last, each with the JSON text ``idb_batch.js`` made of the
    value it put (the same :func:`plainJson` that makes a read's text).

    A record read back with exactly that text is exactly what was written, so it is taken as
    the record written rather than decoded and checked again — the issue's "Python that trusts
    what the engine wrote itself": the settle reads back the claim it stored one transaction
    before. Any other text (another tab's write, a newer pyjobq's, a malformed value) is
    decoded and checked as ever. At most :data:`OWN_WRITES` are kept, the oldest going first."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[str, JobRecord]] = {}

    def read(self, job_id: str, text: str) -> JobRecord | None:
        kept = self._kept.get(job_id)
        return kept[1] if kept is not None and text and kept[0] == text else None

    def committed(self, records: Sequence[JobRecord | None], texts: Sequence[str] | None) -> None:
        """A transaction that put ``records`` (in the order of its puts; None: not to be kept)
        committed; ``texts``: the JSON text of each value put, in order."""
        if not records or texts is None or len(texts) != len(records):
            return
        kept = self._kept
        for record, text in zip(records, texts):
            if record is None:
                continue
            kept.pop(record.id, None)  # a later put of the same record is the one kept
            if text:  # "" when the value is not plain JSON: never taken on trust
                kept[record.id] = (text, record)
        while len(kept) > OWN_WRITES:
            del kept[next(iter(kept))]


#: How many records :class:`_OwnWrites` keeps (a few lanes' worth is what pays).
OWN_WRITES = 256


class _Pending:
    """A one-call transaction under way: what it decides, its end, what its decision raised."""

    def __init__(self, what: str, ended: asyncio.Future[StorageError | None],
                 decide: Callable[[Any], Any] | None) -> None:
        self.what = what
        self.ended = ended
        self._decide = decide
        self.raised: BaseException | None = None
        #: What ``idb_batch.js`` said it put, once committed: each value's JSON text.
        self.written: list[str] | None = None

    def decide(self, values: Any) -> Any:
        """The writes, for the values read; None (the transaction aborts) when deciding raised."""
        if self._decide is None:
            return None
        try:
            return self._decide(values)
        except BaseException as exc:  # an exception must abort, not commit half
            self.raised = exc
            return None


class _OneCalls:
    """Transactions made in one call into ``idb_batch.js``, with the one proxy it calls back."""

    def __init__(self) -> None:
        self._callback: Any = None
        self._pending: dict[int, _Pending] = {}
        self._tokens = itertools.count()
        self._closed = False

    async def run(self, db: Any, what: str, keys: Sequence[str] | None, values: Any,
                  decide: Callable[[Any], Any] | None) -> Any:
        """``update`` (read ``keys``, write what ``decide(values read)`` answers) or, with no
        keys, ``add`` of ``values``: one transaction. Raises what ``decide`` raised, or a
        :class:`StorageError`. Returns, for an update, the JSON text of each value it put
        (:class:`_OwnWrites`), when ``idb_batch.js`` said."""
        self._closed = False
        if self._callback is None:
            self._callback = proxies.create(self._called_back)
        token = next(self._tokens)
        pending = _Pending(what, new_future(), decide)
        self._pending[token] = pending
        try:
            if keys is None:
                BATCHES.get().add(db, STORE, values, token, self._callback)
            else:
                BATCHES.get().update(db, STORE, to_js(list(keys)), token, self._callback)
            error = await pending.ended
        finally:
            del self._pending[token]
            self._drop_callback()
        if pending.raised is not None:
            raised = pending.raised
            raise raised if isinstance(raised, Exception) else StorageError(str(raised))
        if error is not None:
            raise error
        return pending.written

    def close(self) -> None:
        """The connection closed: the proxy goes once no transaction may still call it."""
        self._closed = True
        self._drop_callback()

    def _drop_callback(self) -> None:
        if self._closed and not self._pending and self._callback is not None:
            proxies.destroy(self._callback)
            self._callback = None

    def _called_back(self, token: int, values: Any, end: Any) -> Any:
        """``idb_batch.js`` calls this in a transaction's events: with the values read (the
        answer is what to write), and at its end (the awaiting code goes on at once, in that
        same event: :func:`pyjobq.browser.batching.run_ready`)."""
        pending = self._pending.get(token)
        if pending is None:
            return None
        if end is None or end is jsnull:  # JavaScript passes undefined (None); null is jsnull
            return pending.decide(values)
        if pending.ended.done():
            return None
        try:
            error = None if end.ok else _error(pending.what, end)
        except Exception as exc:  # never a transaction whose end is lost: a clear error
            error = StorageError(f"IndexedDB {pending.what} ended unreadably: {exc}")
        if error is None:
            try:  # what it put, as text: only ever a shortcut, so never a reason to fail
                written: Any = getattr(end, "written", None)
                if written is not None and written is not jsnull:
                    pending.written = written.to_py()
            except Exception as exc:
                log.debug("pyjobq: the texts of what %s put were unreadable: %s", pending.what, exc)
        with batching.event():  # the awaiting code goes on in this event
            pending.ended.set_result(error)
        return None


class _ScheduleStore:
    """The :class:`~pyjobq.core.ports.ScheduleStore` half of :class:`IndexedDBStore`: the
    ``schedules`` object store (schema version 2), and the advance over it and ``jobs``."""

    async def _tx(self, mode: str, what: str, scope: Sequence[str] = (STORE,)) -> _Transaction:
        raise NotImplementedError  # IndexedDBStore's: its connection, opened lazily

    async def schedules(self) -> list[Schedule]:
        t = await self._tx("readonly", "schedules", (SCHEDULES,))
        found: list[Any] = []
        t.then(t.store.getAll(), found.append)
        await t
        schedules = (_schedule(value) for value in (found[0] if found else []))
        return [s for s in schedules if s is not None]

    async def put_schedule(self, name: str,
                           apply: Callable[[Schedule | None], Schedule | None]) -> Schedule | None:
        t = await self._tx("readwrite", "put_schedule", (SCHEDULES,))
        stored: list[Schedule | None] = []

        def read(value: Any) -> None:
            put = rules.put_schedule(not _absent(value), _schedule(value), apply)
            if put.write is not None:
                t.store.put(_to_js(put.write.to_dict()))
            stored.append(put.answer)

        t.then(t.store.get(name), read)
        await t
        return stored[0] if stored else None

    async def delete_schedule(self, name: str) -> Schedule | None:
        t = await self._tx("readwrite", "delete_schedule", (SCHEDULES,))
        deleted: list[Schedule] = []

        def read(value: Any) -> None:
            if _absent(value):
                return
            current = _schedule(value)
            if rules.deletes_schedule(current, _schedule_data(value)):
                t.store.delete(name)
            if current is not None:
                deleted.append(current)

        t.then(t.store.get(name), read)
        await t
        return deleted[0] if deleted else None

    async def advance_schedule(
            self, name: str,
            decide: Callable[[Schedule, JobRecord | None], Occurrence | None],
    ) -> Occurrence | None:
        # One transaction over both stores: the schedule read, then its last job read from the
        # schedule's success event, then the decision and both writes from the job's — so the
        # slot is decided on what this transaction read (pyjobq/core/ports.py, ScheduleStore).
        t = await self._tx("readwrite", "advance_schedule", (STORE, SCHEDULES))
        schedules = t.object_store(SCHEDULES)
        applied: list[Occurrence] = []

        def write(current: Schedule, previous: JobRecord | None) -> None:
            decided = decide(current, previous)
            if decided is None:
                return
            schedules.put(_to_js(decided.schedule.to_dict()))
            if decided.job is not None:
                t.store.add(_to_js(decided.job.to_dict()))  # an existing id aborts it all
            applied.append(decided)

        def read_schedule(value: Any) -> None:
            current = _schedule(value)
            if current is None:
                return
            if current.last_job_id is None:
                write(current, None)
                return
            t.then(t.store.get(current.last_job_id),
                   lambda job: write(current, _previous_job(job)))

        t.then(schedules.get(name), read_schedule)
        try:
            await t
        except StorageError as exc:
            if "ConstraintError" in str(exc):
                raise KeyError(f"advancing schedule {name!r}: its occurrence's job id already "
                               "exists") from None
            raise
        return applied[0] if applied else None



class IndexedDBStore(_ScheduleStore):
    """:class:`~pyjobq.core.ports.Store` over the application-named IndexedDB database.

    When another tab opens the database at a newer version (``versionchange``), the
    store closes its connection so that upgrade is not blocked, calls ``on_upgraded``
    with a message telling the user to reload, and from then on every operation raises
    :class:`DatabaseUpgradedError` with that message at once: the page with the newer
    code owns the database now, and reopening it at its own version could only fail.
    """

    def __init__(self, db_name: str, on_upgraded: Callable[[str], None] | None = None) -> None:
        self.db_name = db_name
        self.on_upgraded = on_upgraded
        self._db: Any = None
        self._opening: asyncio.Future[Any] | None = None
        self._unlisten: Callable[[], None] | None = None
        self._one_calls = _OneCalls()
        #: What this store's own transactions wrote last: read back unchanged, trusted.
        self._own = _OwnWrites()
        #: Why this store no longer works, once another tab upgraded the database.
        self.upgraded: str | None = None

    async def _open(self) -> Any:
        if self.upgraded is not None:
            raise DatabaseUpgradedError(self.upgraded)
        if self._db is not None:
            return self._db
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._do_open())
        try:
            return await self._opening
        finally:
            self._opening = None

    async def _do_open(self) -> Any:
        loop = asyncio.get_event_loop()
        opened: asyncio.Future[Any] = loop.create_future()
        request = js.indexedDB.open(self.db_name, DB_VERSION)
        made: list[Any] = []

        def proxy(fn: Callable[..., Any]) -> Any:
            p = proxies.create(fn)
            made.append(p)
            return p

        def upgrade(_event: Any) -> None:
            upgrade_step(request.result, request.transaction)

        def fail(_event: Any) -> None:
            if not opened.done():
                opened.set_exception(_error(f"opening database {self.db_name!r}", request.error))

        def blocked(_event: Any) -> None:
            log.warning("pyjobq: opening %r is blocked by another tab holding an older version",
                        self.db_name)

        def success(_event: Any) -> None:
            if not opened.done():
                opened.set_result(request.result)

        request.onupgradeneeded = proxy(upgrade)
        request.onerror = proxy(fail)
        request.onblocked = proxy(blocked)
        request.onsuccess = proxy(success)
        try:
            db = await opened
        finally:
            for p in made:
                proxies.destroy(p)
        self._unlisten = proxies.listen(db, "versionchange", self._versionchange)
        self._db = db
        return db

    def _versionchange(self, event: Any) -> None:
        # Another tab wants a newer schema (or deletes the database): get out of its way
        # rather than block it, and say what the user must do.
        new_version = getattr(event, "newVersion", None)
        if new_version:
            what = f"was upgraded to version {int(new_version)} by another tab"
        else:
            what = "was deleted by another tab"
        self.upgraded = (
            f"IndexedDB database {self.db_name!r} {what}; this page runs older code "
            f"(schema version {DB_VERSION}) and has stopped using it. Reload this page: "
            "the page with the newer code owns the database now."
        )
        # The listener running right now can't be destroyed from inside its own call.
        asyncio.get_event_loop().call_soon(self.close)
        if self._db is not None:
            self._db.close()  # at once: a later close would still block the upgrade a turn
        if self.on_upgraded is not None:
            self.on_upgraded(self.upgraded)
        else:
            log.error("pyjobq: %s", self.upgraded)

    def close(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        if self._db is not None:
            self._db.close()
            self._db = None
        self._one_calls.close()

    async def _in_one_call(self, what: str, keys: Sequence[str] | None, values: Any,
                           decide: Callable[[Any], Any] | None = None) -> Any:
        db = await self._open()
        if self.upgraded is not None:  # upgraded while this operation waited for the open
            raise DatabaseUpgradedError(self.upgraded)
        return await self._one_calls.run(db, what, keys, values, decide)

    async def _tx(self, mode: str, what: str, scope: Sequence[str] = (STORE,)) -> _Transaction:
        db = await self._open()
        if self.upgraded is not None:  # upgraded while this operation waited for the open
            raise DatabaseUpgradedError(self.upgraded)
        return _Transaction(db, mode, what, scope)

    # ------------------------------------------------------------ the Store contract

    async def add(self, records: Sequence[JobRecord]) -> list[JobRecord]:
        kept, dropped = rules.last_per_key(records)
        rules.check_ids(records)
        # One conversion and one call for the whole batch.
        values = to_js([record.to_dict() for record in kept],
                       dict_converter=js.Object.fromEntries, create_pyproxies=False)
        keys = sorted({r.key for r in kept if r.key is not None and rules.replaces(r)})
        replaced: list[JobRecord] = []
        try:
            if keys:
                t = await self._tx("readwrite", "add")
                _add_keyed(t, values, keys, {r.id for r in kept}, replaced)
                await t
            elif BATCHES.get() is not None:
                await self._in_one_call("add", None, values)
            else:
                t = await self._tx("readwrite", "add")
                for value in values:
                    t.store.add(value)
                await t
        except StorageError as exc:
            if "ConstraintError" in str(exc):
                raise KeyError("a job with one of these ids already exists: "
                               f"{[r.id for r in records][:5]}") from None
            raise
        return rules.oldest_first(replaced) + dropped

    async def get(self, job_id: str) -> JobRecord | None:
        t = await self._tx("readonly", "get")
        found: list[Any] = []
        t.then(t.store.get(job_id), found.append)
        await t
        if not found or found[0] is None:
            return None
        bad: list[tuple[Any, JobRecord]] = []
        record = _decode(found[0], bad)
        if bad:
            await self._fail_malformed(bad)
            return bad[0][1]
        return record

    async def update(self, change: Change) -> Updated:
        return (await self.update_many([change]))[0]

    async def update_many(self, changes: Sequence[Change]) -> list[Updated]:
        if not changes:
            return []
        done: list[Updated] = []
        if BATCHES.get() is None:
            t = await self._tx("readwrite", "update_many")
            _update_per_request(t, changes, done)
            await t
            return done
        put: list[JobRecord | None] = []
        self._own.committed(put, await self._in_one_call(
            "update_many", [c.job_id for c in changes], None,
            lambda read: _apply(changes, done, read.values, read.texts.to_py(), self._own, put)))
        return done

    async def update_keyed(self, changes: Sequence[KeyChange]) -> KeyUpdated:
        if not changes:
            return KeyUpdated([], [])
        t = await self._tx("readwrite", "update_keyed")
        done: list[Updated | None] = [None] * len(changes)
        replaced: list[JobRecord] = []
        _update_keyed(t, changes, done, replaced)
        await t
        return KeyUpdated([u if u is not None else Updated(None, False) for u in done],
                          rules.oldest_first(replaced))

    async def update_by_status(self, statuses: Collection[Status],
                               apply: Callable[[JobRecord], JobRecord | None], *,
                               due_after: float | None = None) -> list[Updated]:
        wanted = frozenset(Status(s) for s in statuses)
        t = await self._tx("readwrite", "update_by_status")
        done: list[Updated] = []
        step = _changing_step(t, wanted, apply, done, by_status=due_after is None)
        if due_after is not None:  # one walk of what is due later, whatever its status
            t.then(t.store.index("by_next_retry").openCursor(
                js.IDBKeyRange.lowerBound(due_after, True)), step)
        else:
            index = t.store.index("by_status")
            for status in sorted(s.value for s in wanted):
                t.then(index.openCursor(status), step)
        await t
        done.sort(key=lambda u: (u.record.created_at, u.record.id) if u.record is not None
                  else (0.0, ""))
        return done

    async def entries(self, ids: Sequence[str] | None = None) -> list[Entry]:
        t = await self._tx("readonly", "entries")
        found: list[Entry] = []
        bad: list[tuple[Any, JobRecord]] = []

        def add(value: Any, key: Any) -> None:
            entry = _entry(value, key, bad)
            if entry is not None and (ids is not None or entry.status in UNFINISHED):
                found.append(entry)

        def step(cursor: Any) -> None:
            if not cursor:  # the end: JavaScript null (a falsy JsNull, not None, in newer Pyodide)
                return
            add(cursor.value, cursor.primaryKey)
            cursor.continue_()  # fires the same request's success event again

        if ids is None:
            index = t.store.index("by_status")
            for status in sorted(s.value for s in UNFINISHED):
                t.then(index.openCursor(status), step)
        else:
            def read(job_id: str, value: Any) -> None:
                if value is not None:
                    add(value, job_id)

            for job_id in ids:
                t.then(t.store.get(job_id), functools.partial(read, job_id))
        await t
        if bad:
            await self._fail_malformed(bad)
        found.sort(key=lambda e: (e.created_at, e.id))
        return found

    async def delete_many(self, job_ids: Sequence[str],
                          when: Collection[Status] | None = None) -> list[JobRecord]:
        if not job_ids:
            return []
        t = await self._tx("readwrite", "delete_many")
        deleted: list[JobRecord] = []

        def one(job_id: str, value: Any) -> None:
            record = _deletable(value)
            if record is not None and (when is None or record.status in when):
                t.store.delete(job_id)
                deleted.append(record)

        # Each get is issued now and each delete from its success event: what is read is what
        # is deleted, in this one transaction (a change made in between would be lost).
        for job_id in dict.fromkeys(job_ids):
            t.then(t.store.get(job_id), functools.partial(one, job_id))
        await t
        return deleted

    async def delete_group(self, group: str) -> list[JobRecord]:
        t = await self._tx("readwrite", "delete_group")
        deleted: list[JobRecord] = []

        def step(cursor: Any) -> None:
            if not cursor:  # the end: JavaScript null (a falsy JsNull, not None, in newer Pyodide)
                return
            record = _deletable(cursor.value)
            if record is not None:
                cursor.delete()
                deleted.append(record)
            cursor.continue_()  # fires the same request's success event again

        t.then(t.store.index("by_group").openCursor(group), step)
        await t
        deleted.sort(key=lambda r: (r.created_at, r.id))
        return deleted

    async def _get_all(self, index: str | None, query: Any, what: str) -> list[JobRecord]:
        t = await self._tx("readonly", what)
        source = t.store if index is None else t.store.index(index)
        found: list[Any] = []
        t.then(source.getAll(query) if query is not None else source.getAll(), found.append)
        await t
        bad: list[tuple[Any, JobRecord]] = []
        records = _records(found[0], bad) if found else []
        if bad:
            await self._fail_malformed(bad)
            if index is None:  # all(): show the failed forms now, not on the next read
                records = sorted(records + [r for _, r in bad], key=lambda r: (r.created_at, r.id))
        return records

    async def _fail_malformed(self, bad: list[tuple[Any, JobRecord]]) -> None:
        """Fail every malformed value found by a read, in one write.

        The read was another transaction: each value is read again in this one and failed only
        if it still is malformed, so a write committed in between (a delete, a valid record)
        is kept rather than overwritten with the failed form of what was there before."""
        t = await self._tx("readwrite", "fail_malformed")

        def recheck(key: Any, value: Any) -> None:
            if value is None or value is jsnull:
                return  # deleted since
            still: list[tuple[Any, JobRecord]] = []
            _decode(value, still, quiet=True)
            if still:
                _put_failed(t.store, key, still[0][1])

        for key, record in bad:
            if key is None:  # no key to read it again by
                _put_failed(t.store, key, record)
            else:
                t.then(t.store.get(key), functools.partial(recheck, key))
        await t

    async def by_status(self, status: str) -> list[JobRecord]:
        return await self._get_all("by_status", Status(status).value, "by_status")

    async def by_group(self, group: str) -> list[JobRecord]:
        return await self._get_all("by_group", group, "by_group")

    async def next_due_at(self, after: float | None = None) -> float | None:
        t = await self._tx("readonly", "next_due_at")
        found: list[float] = []

        # The index is ordered by next_retry_at, every number before any other kind of key: walk
        # it from the soonest (past ``after``) to the first record a pass could claim. Any other
        # record's key is stepped over (the Store contract): one done or foreign record with a
        # past next_retry_at must not arm a wake in the past, again and again ("no spin").
        def step(cursor: Any) -> None:
            if not cursor:  # the end: JavaScript null (a falsy JsNull, not None, in newer Pyodide)
                return
            key = cursor.key
            if not isinstance(key, (int, float)) or isinstance(key, bool) or key == math.inf:
                return  # +Infinity, then dates, strings, arrays: none is a moment to wake at
            # A missing property raises AttributeError through the proxy: read with a default.
            if math.isfinite(key) and getattr(cursor.value, "status", None) in CLAIMABLE:
                found.append(float(key))
                return
            cursor.continue_()  # fires the same request's success event again

        query = None if after is None else js.IDBKeyRange.lowerBound(after, True)
        index = t.store.index("by_next_retry")
        t.then(index.openCursor() if query is None else index.openCursor(query), step)
        await t
        return found[0] if found else None

    async def all(self) -> list[JobRecord]:
        return await self._get_all(None, None, "all")


def _absent(value: Any) -> bool:
    return value is None or value is jsnull


def _schedule_data(value: Any) -> Any:
    return _nulls_to_none(value.to_py()) if hasattr(value, "to_py") else value


def _schedule(value: Any) -> Schedule | None:
    """A stored schedule; None for none, a malformed value (logged) or a newer pyjobq's."""
    if _absent(value):
        return None
    try:
        return rules.schedule_of(_schedule_data(value))
    except Exception as exc:  # a value to_py cannot read
        log.error("pyjobq: skipping a stored schedule that cannot be read: %s", exc)
        return None


def _previous_job(value: Any) -> JobRecord | None:
    """The last occurrence's job as read in the advance; None for none, or one that is not a
    record (failed by the next read that meets it) or a newer pyjobq's."""
    if _absent(value):
        return None
    bad: list[tuple[Any, JobRecord]] = []
    record = _decode(value, bad, quiet=True)
    return None if bad else record
