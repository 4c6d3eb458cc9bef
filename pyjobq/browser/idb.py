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

Schema (spec: "The job record"): the application-named database, version 1,
object store ``jobs`` keyed on ``id``, indexes ``by_status``, ``by_group``,
``by_group_status`` (compound) and ``by_next_retry``. ``next_retry_at`` is set
only on pending records, so ``by_next_retry`` lists exactly the waiting work.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Sequence

import js  # type: ignore[import-not-found]
from pyodide.ffi import create_proxy, to_js  # type: ignore[import-not-found]

from ..core.records import DueKey, JobRecord, RecordError
from ..core.status import Status
from ..errors import PyjobqError

log = logging.getLogger("pyjobq")

DB_VERSION = 1
STORE = "jobs"
INDEXES: dict[str, Any] = {
    "by_status": "status",
    "by_group": "group",
    "by_group_status": ["group", "status"],
    "by_next_retry": "next_retry_at",
}


class StorageError(PyjobqError):
    """IndexedDB refused an operation (quota exceeded, blocked, closed by a newer version)."""


def _to_js(value: dict[str, Any]) -> Any:
    return to_js(value, dict_converter=js.Object.fromEntries, create_pyproxies=False)


def _error(what: str, error: Any) -> StorageError:
    name = getattr(error, "name", None) or "Error"
    message = getattr(error, "message", None) or str(error)
    hint = ""
    if name == "QuotaExceededError":
        hint = " The browser's storage quota for this origin is full; delete finished jobs or free space."
    return StorageError(f"IndexedDB {what} failed: {name}: {message}.{hint}")


class _Transaction:
    """One transaction: requests issued synchronously, one future for its end."""

    def __init__(self, db: Any, mode: str, what: str) -> None:
        self.what = what
        self.tx = db.transaction(STORE, mode)
        self.store = self.tx.objectStore(STORE)
        self.future: asyncio.Future[None] = asyncio.get_event_loop().create_future()
        self._proxies: list[Any] = []
        self.tx.oncomplete = self._proxy(lambda _e: self._finish(None))
        # A request's error bubbles here before the transaction has its own .error set.
        self.tx.onerror = self._proxy(lambda e: self._finish(_error(what, e.target.error or self.tx.error)))
        self.tx.onabort = self._proxy(lambda _e: self._finish(_error(what, self.tx.error or "aborted")))

    def _proxy(self, fn: Callable[..., Any]) -> Any:
        proxy = create_proxy(fn)
        self._proxies.append(proxy)
        return proxy

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
        # The proxy running right now can't be destroyed from inside its own call.
        asyncio.get_event_loop().call_soon(self._release)

    def _release(self) -> None:
        for proxy in self._proxies:
            proxy.destroy()
        self._proxies = []

    def __await__(self) -> Any:
        return self.future.__await__()


def _records(values: Any) -> list[JobRecord]:
    records = []
    for value in values:
        data = value.to_py()
        try:
            records.append(JobRecord.from_dict(data))
        except RecordError as exc:
            log.error("pyjobq: skipped a malformed record in IndexedDB: %s", exc)
    records.sort(key=lambda r: (r.created_at, r.id))
    return records


class IndexedDBStore:
    """:class:`~pyjobq.core.ports.Store` over the application-named IndexedDB database."""

    def __init__(self, db_name: str) -> None:
        self.db_name = db_name
        self._db: Any = None
        self._opening: asyncio.Future[Any] | None = None
        self._on_versionchange: Any = None

    async def _open(self) -> Any:
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
        proxies: list[Any] = []

        def proxy(fn: Callable[..., Any]) -> Any:
            p = create_proxy(fn)
            proxies.append(p)
            return p

        def upgrade(_event: Any) -> None:
            db = request.result
            if not db.objectStoreNames.contains(STORE):
                store = db.createObjectStore(STORE, _to_js({"keyPath": "id"}))
                for name, key_path in INDEXES.items():
                    store.createIndex(name, to_js(key_path) if isinstance(key_path, list) else key_path)

        def fail(_event: Any) -> None:
            if not opened.done():
                opened.set_exception(_error(f"opening database {self.db_name!r}", request.error))

        def blocked(_event: Any) -> None:
            log.warning("pyjobq: opening %r is blocked by another tab holding an older version", self.db_name)

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
            for p in proxies:
                p.destroy()
        self._on_versionchange = create_proxy(self._versionchange)
        db.addEventListener("versionchange", self._on_versionchange)
        self._db = db
        return db

    def _versionchange(self, _event: Any) -> None:
        # Another tab wants a newer schema: get out of its way rather than block it.
        log.warning("pyjobq: database %r is being upgraded by another tab; closing it here", self.db_name)
        self.close()

    def close(self) -> None:
        if self._db is not None:
            self._db.removeEventListener("versionchange", self._on_versionchange)
            self._on_versionchange.destroy()
            self._db.close()
            self._db = None

    async def _tx(self, mode: str, what: str) -> _Transaction:
        return _Transaction(await self._open(), mode, what)

    # ------------------------------------------------------------ the Store contract

    async def add(self, records: Sequence[JobRecord]) -> None:
        t = await self._tx("readwrite", "add")
        for record in records:
            t.store.add(_to_js(record.to_dict()))
        try:
            await t
        except StorageError as exc:
            if "ConstraintError" in str(exc):
                raise KeyError(f"a job with one of these ids already exists: {[r.id for r in records][:5]}") from None
            raise

    async def get(self, job_id: str) -> JobRecord | None:
        t = await self._tx("readonly", "get")
        found: list[Any] = []
        t.then(t.store.get(job_id), found.append)
        await t
        if not found or found[0] is None:
            return None
        return JobRecord.from_dict(found[0].to_py())

    async def update(self, job_id: str, change: Callable[[JobRecord], JobRecord | None]) -> JobRecord | None:
        t = await self._tx("readwrite", "update")
        after: list[JobRecord | None] = []

        def read(value: Any) -> None:
            if value is None:
                after.append(None)
                return
            current = JobRecord.from_dict(value.to_py())
            new = change(current)
            if new is None:
                after.append(current)
                return
            t.store.put(_to_js(new.to_dict()))
            after.append(new)

        t.then(t.store.get(job_id), read)
        await t
        return after[0] if after else None

    async def put_many(self, records: Sequence[JobRecord]) -> None:
        t = await self._tx("readwrite", "put_many")
        for record in records:
            t.store.put(_to_js(record.to_dict()))
        await t

    async def delete_many(self, job_ids: Sequence[str]) -> None:
        if not job_ids:
            return
        t = await self._tx("readwrite", "delete_many")
        for job_id in job_ids:
            t.store.delete(job_id)
        await t

    async def _get_all(self, index: str | None, query: Any, what: str) -> list[JobRecord]:
        t = await self._tx("readonly", what)
        source = t.store if index is None else t.store.index(index)
        found: list[Any] = []
        t.then(source.getAll(query) if query is not None else source.getAll(), found.append)
        await t
        return _records(found[0]) if found else []

    async def by_status(self, status: str) -> list[JobRecord]:
        return await self._get_all("by_status", Status(status).value, "by_status")

    async def by_group(self, group: str) -> list[JobRecord]:
        return await self._get_all("by_group", group, "by_group")

    async def due(self, now: float) -> list[JobRecord]:
        records = await self._get_all("by_next_retry", js.IDBKeyRange.upperBound(now), "due")
        return [r for r in records if r.status is Status.PENDING]

    async def due_keys(self, now: float) -> list[DueKey]:
        t = await self._tx("readonly", "due_keys")
        keys: list[DueKey] = []

        # A value cursor over the index, reading four fields through the proxy:
        # the payload stays in JavaScript, never decoded into Python.
        def step(cursor: Any) -> None:
            if not cursor:  # the end: JavaScript null (a falsy JsNull, not None, in newer Pyodide)
                return
            value = cursor.value
            if value.status in ("pending", "running"):
                keys.append(DueKey(str(cursor.primaryKey), str(value.type), float(value.created_at),
                                   Status(value.status)))
            cursor.continue_()  # fires the same request's success event again

        cursor_request = t.store.index("by_next_retry").openCursor(js.IDBKeyRange.upperBound(now))
        t.then(cursor_request, step)
        await t
        keys.sort(key=lambda k: (k.created_at, k.id))
        return keys

    async def next_due_at(self, after: float | None = None) -> float | None:
        t = await self._tx("readonly", "next_due_at")
        first: list[Any] = []
        # The index is ordered by next_retry_at: its first key (past ``after``) is the soonest.
        # Only pending records and running leases carry next_retry_at (see records.py).
        query = None if after is None else js.IDBKeyRange.lowerBound(after, True)
        index = t.store.index("by_next_retry")
        request = index.openKeyCursor() if query is None else index.openKeyCursor(query)
        t.then(request, lambda c: first.append(c.key if c else None))
        await t
        return float(first[0]) if first and first[0] is not None else None

    async def all(self) -> list[JobRecord]:
        return await self._get_all(None, None, "all")
