"""The Store contract (pyjobq.core.ports.Store), as plain async checks.

Each ``check_*`` takes a fresh, empty store and raises AssertionError (or lets an
unexpected exception through) when the store breaks the contract. No pytest in
here: the same module runs on CPython against :class:`pyjobq.memory.MemoryStore`
(tests/test_memory_store.py) and inside Pyodide against the IndexedDB store::

    for check in store_contract.CHECKS:
        await check(await make_fresh_store())
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from pyjobq.core.ports import (  # also store_contract.Change/Updated, for the store tests
    Change,
    Updated,
)
from pyjobq.core.records import JobRecord
from pyjobq.core.status import Status
from pyjobq.core.view import Entry
from pyjobq.testing import record

T0 = 1_700_000_000_000.0


def make_record(job_id: str, *, created_at: float = T0, status: str = "pending", type: str = "t",
                group: str | None = None, next_retry_at: float | None = None,
                **changes: Any) -> JobRecord:
    """:func:`pyjobq.testing.record` with a nested body (copies must be deep); ``next_retry_at``
    defaults to ``created_at`` for pending, None otherwise."""
    if next_retry_at is None and status == "pending":
        next_retry_at = created_at
    return record(job_id, created_at=created_at, status=status, type=type, group=group,
                  next_retry_at=next_retry_at,
                  params={"method": "POST", "path": f"/{job_id}", "body": {"n": [1, 2]}}, **changes)


def _ids(records: list[JobRecord]) -> list[str]:
    return [r.id for r in records]


async def _raises(exc_type: type[BaseException], awaitable: Awaitable[Any]) -> BaseException:
    try:
        await awaitable
    except exc_type as exc:
        return exc
    raise AssertionError(f"expected {exc_type.__name__}")


async def check_add_then_get(store: Any) -> None:
    a, b = make_record("a"), make_record("b", created_at=T0 + 1, group="g", label="L")
    await store.add([a, b])
    assert await store.get("a") == a
    assert await store.get("b") == b


async def check_get_missing_is_none(store: Any) -> None:
    assert await store.get("nope") is None


async def check_add_empty_batch(store: Any) -> None:
    await store.add([])
    assert await store.all() == []


async def check_add_duplicate_raises_and_adds_none_of_the_batch(store: Any) -> None:
    old = make_record("a", label="original")
    await store.add([old])
    exc = await _raises(KeyError, store.add([make_record("new1"), make_record("a", label="dup"),
                                             make_record("new2")]))
    assert "a" in str(exc)
    assert await store.all() == [old]


async def check_add_same_id_twice_in_one_batch_adds_none(store: Any) -> None:
    await _raises(KeyError, store.add([make_record("x"), make_record("y"), make_record("x")]))
    assert await store.all() == []


async def check_update_read_modify_write(store: Any) -> None:
    a = make_record("a")
    await store.add([a])
    seen: list[JobRecord] = []

    def change(cur: JobRecord) -> JobRecord:
        seen.append(cur)
        return cur.evolve(attempts=cur.attempts + 1, status=Status.RUNNING, next_retry_at=None,
                          owner="tab")

    expected = a.evolve(attempts=1, status=Status.RUNNING, next_retry_at=None, owner="tab")
    assert await store.update(Change("a", change)) == Updated(expected, True)
    assert seen == [a]
    assert await store.get("a") == expected
    again = await store.update(Change("a", change))
    assert again.applied and again.record is not None and again.record.attempts == 2


async def check_update_missing_returns_none_without_calling(store: Any) -> None:
    calls: list[JobRecord] = []
    assert await store.update(Change("nope", lambda cur: calls.append(cur) or cur)) == (
        Updated(None, False))
    assert calls == []
    assert await store.all() == []


async def check_update_returning_none_leaves_it(store: Any) -> None:
    a = make_record("a")
    await store.add([a])
    assert await store.update(Change("a", lambda cur: None)) == Updated(a, False)
    assert await store.get("a") == a
    # A status precondition that does not hold: the change is not even called.
    calls: list[JobRecord] = []
    assert await store.update(Change("a", lambda cur: calls.append(cur) or cur,
                                     frozenset({Status.RUNNING}))) \
        == Updated(a, False)
    assert calls == [] and await store.get("a") == a


async def check_delete_many_ignores_missing(store: Any) -> None:
    await store.add([make_record("a"), make_record("b", created_at=T0 + 1),
                     make_record("c", created_at=T0 + 2)])
    await store.delete_many(["a", "missing", "c"])
    assert _ids(await store.all()) == ["b"]
    await store.delete_many([])
    assert _ids(await store.all()) == ["b"]


async def check_by_status_oldest_first(store: Any) -> None:
    await store.add([
        make_record("p2", created_at=T0 + 2),
        make_record("r1", created_at=T0 + 1, status="running"),
        make_record("p1b", created_at=T0 + 1),
        make_record("p1a", created_at=T0 + 1),
        make_record("p0", created_at=T0),
    ])
    assert _ids(await store.by_status("pending")) == ["p0", "p1a", "p1b", "p2"]
    assert _ids(await store.by_status(Status.RUNNING)) == ["r1"]
    assert await store.by_status("failed") == []


async def check_by_group_oldest_first(store: Any) -> None:
    await store.add([
        make_record("g2", created_at=T0 + 2, group="g", status="done"),
        make_record("h1", created_at=T0 + 1, group="h"),
        make_record("g1", created_at=T0 + 1, group="g"),
        make_record("none", created_at=T0),
    ])
    assert _ids(await store.by_group("g")) == ["g1", "g2"]
    assert await store.by_group("nothing") == []


async def check_next_due_at(store: Any) -> None:
    assert await store.next_due_at() is None
    await store.add([make_record("done", status="done"), make_record("run", status="running")])
    assert await store.next_due_at() is None
    await store.add([make_record("x", next_retry_at=T0 + 500),
                     make_record("y", next_retry_at=T0 + 20)])
    assert await store.next_due_at() == T0 + 20


async def check_next_due_at_counts_leases_and_skips_up_to_after(store: Any) -> None:
    await store.add([
        make_record("p", next_retry_at=T0 + 20),
        make_record("lease", status="running", owner="tab", next_retry_at=T0 + 10),
        make_record("q", next_retry_at=T0 + 30),
    ])
    assert await store.next_due_at() == T0 + 10
    assert await store.next_due_at(after=T0 + 10) == T0 + 20
    assert await store.next_due_at(after=T0 + 25) == T0 + 30
    assert await store.next_due_at(after=T0 + 30) is None


async def check_next_due_at_counts_only_what_a_pass_could_claim(store: Any) -> None:
    # Other code may leave a next_retry_at on any record: only a pending one or a running lease
    # is work a pass could claim, so only theirs makes a wake (one in the past made it spin).
    await store.add([
        make_record("done", status="done", next_retry_at=T0 - 500),
        make_record("failed", status="failed", next_retry_at=T0 - 400),
        make_record("cancelled", status="cancelled", next_retry_at=T0 - 300),
        make_record("paused", status="paused", yield_lock="fg", next_retry_at=T0 - 200),
        make_record("locked", status="running", owner="tab"),
    ])
    assert await store.next_due_at() is None
    assert await store.next_due_at(after=T0 - 1000) is None
    await store.add([make_record("later", next_retry_at=T0 + 20),
                     make_record("lease", status="running", owner="tab", next_retry_at=T0 + 30)])
    assert await store.next_due_at() == T0 + 20
    assert await store.next_due_at(after=T0 - 450) == T0 + 20
    assert await store.next_due_at(after=T0 + 20) == T0 + 30


async def check_all_oldest_first(store: Any) -> None:
    assert await store.all() == []
    await store.add([make_record("c", created_at=T0 + 1), make_record("b", created_at=T0 + 1),
                     make_record("a", created_at=T0 + 2, status="failed")])
    assert _ids(await store.all()) == ["b", "c", "a"]


async def check_returned_records_are_copies(store: Any) -> None:
    a = make_record("a")
    await store.add([a])
    a._params["body"]["n"].append("added after add")  # the caller's object changing later
    got = await store.get("a")
    assert got._params == {"method": "POST", "path": "/a", "body": {"n": [1, 2]}}
    got._params["body"]["n"].append("mutated")
    (await store.all())[0]._params["path"] = "/mutated"
    assert (await store.get("a"))._params == {"method": "POST", "path": "/a", "body": {"n": [1, 2]}}


async def check_record_round_trips_every_field(store: Any) -> None:
    full = make_record("a", status="failed", group="g", label="L", result={"r": [1, None, "x"]},
                       error="boom", http_status=409, code="conflict", attempts=3, max_attempts=4,
                       given_back=2, updated_at=T0 + 5)
    paused = make_record("b", status="paused", yield_lock="fg")
    running = make_record("c", status="running", owner="tab-1", attempts=1)
    await store.add([full, paused, running])
    assert await store.all() == [full, paused, running]


async def check_a_code_member_is_stored_as_its_string(store: Any) -> None:
    from pyjobq.codes import Code
    from pyjobq.core import policy
    from pyjobq.core.status import UNFINISHED

    await store.add([make_record("a"), make_record("b", created_at=T0 + 1)])
    done = await store.update_many([Change("a", lambda cur: policy.cancel(cur, T0 + 1), UNFINISHED),
                                    Change("b", lambda cur: cur.evolve(code=Code.OFFLINE))])
    assert [(u.applied, u.record and u.record.code) for u in done] == [
        (True, "cancelled"), (True, "offline")]
    got = await store.get("a")
    assert got.status is Status.CANCELLED
    assert got.code == Code.CANCELLED and str(got.code) == "cancelled"
    assert [(r.id, str(r.code)) for r in await store.all()] == [
        ("a", "cancelled"), ("b", "offline")]


async def check_update_many_in_order_with_preconditions(store: Any) -> None:
    from pyjobq.core.ports import Change

    a, b, c = make_record("a"), make_record("b", created_at=T0 + 1), make_record("c", status="done")
    await store.add([a, b, c])
    calls: list[str] = []

    def to_running(cur: JobRecord) -> JobRecord:
        calls.append(cur.id)
        return cur.evolve(status=Status.RUNNING, owner="me", next_retry_at=None)

    pending = frozenset({Status.PENDING})
    done = await store.update_many([
        Change("a", to_running, pending),
        Change("c", to_running, pending),  # outside its precondition: not called
        Change("nope", to_running),  # missing: not called
        Change("b", lambda cur: None),  # declines
        # sees the first change
        Change("a", lambda cur: cur.evolve(label=f"after {cur.status.value}")),
    ])
    assert calls == ["a"]
    assert [(u.record.id if u.record else None, u.applied) for u in done] == \
        [("a", True), ("c", False), (None, False), ("b", False), ("a", True)]
    assert done[1].record == c and done[3].record == b
    stored = await store.get("a")
    assert stored is not None
    assert stored.status is Status.RUNNING and stored.label == "after running"
    assert done[4].record == stored
    assert await store.update_many([]) == []


async def check_update_many_all_or_none(store: Any) -> None:
    from pyjobq.core.ports import Change

    await store.add([make_record("a"), make_record("b")])

    def boom(cur: JobRecord) -> JobRecord:
        raise ValueError("no")

    try:
        await store.update_many([Change("a", lambda cur: cur.evolve(label="x")), Change("b", boom)])
    except Exception:
        pass
    else:
        raise AssertionError("a change that raises must fail the whole update_many")
    a = await store.get("a")
    assert a is not None and a.label is None, "the first change must not have been stored"


async def check_entries_unfinished_and_by_id(store: Any) -> None:
    from pyjobq.core.view import Entry

    p = make_record("p", type="x", created_at=T0 + 2)
    r = make_record("r", status="running", owner="tab", attempts=1, created_at=T0 + 1)
    z = make_record("z", status="paused", yield_lock="fg")
    d = make_record("d", status="done")
    f = make_record("f", status="failed")
    await store.add([p, r, z, d, f])
    assert await store.entries() == [Entry.of(z), Entry.of(r), Entry.of(p)]
    assert (await store.entries())[2] == Entry(
        "p", "x", Status.PENDING, T0 + 2, T0 + 2, None, None, T0 + 2, 0)
    assert await store.entries(["d", "nope", "p"]) == [Entry.of(d), Entry.of(p)]
    assert await store.entries([]) == []


async def check_delete_many_returns_what_it_deleted(store: Any) -> None:
    a, b = make_record("a"), make_record("b", created_at=T0 + 1, status="failed")
    await store.add([a, b, make_record("c", created_at=T0 + 2)])
    # in the order asked, once each
    assert await store.delete_many(["b", "missing", "a", "b"]) == [b, a]
    assert _ids(await store.all()) == ["c"]
    assert await store.delete_many(["a"]) == [] and await store.delete_many([]) == []


async def check_delete_group_deletes_the_group_in_one_call(store: Any) -> None:
    g2 = make_record("g2", created_at=T0 + 2, group="g", status="done")
    g1 = make_record("g1", created_at=T0 + 1, group="g", status="running", owner="tab")
    await store.add([g2, g1, make_record("h1", created_at=T0, group="h"),
                     make_record("none", created_at=T0 + 3)])
    assert await store.delete_group("g") == [g1, g2]  # oldest first, whatever their status
    assert _ids(await store.all()) == ["h1", "none"]
    assert await store.delete_group("g") == [] and await store.delete_group("nothing") == []


def _revive(cur: JobRecord) -> JobRecord:
    from pyjobq.core import policy

    return policy.revive(cur, T0 + 5)


async def check_a_delete_and_a_change_made_after_it_apply_in_call_order(store: Any) -> None:
    """A delete reads what it deletes in its own transaction: a change issued after it (not
    awaited in between) finds nothing. A read in one transaction and a delete in another let
    that change land between them: it applied, then was deleted — a retry_job lost."""
    import asyncio

    from pyjobq.core.status import REVIVABLE

    x = make_record("x", status="failed", error="boom")
    y = make_record("y", status="failed", group="g")
    await store.add([x, y])
    deleted, changed = await asyncio.gather(store.delete_many(["x"]),
                                            store.update(Change("x", _revive, REVIVABLE)))
    assert (deleted, changed) == ([x], Updated(None, False))
    deleted, changed = await asyncio.gather(store.delete_group("g"),
                                            store.update(Change("y", _revive, REVIVABLE)))
    assert (deleted, changed) == ([y], Updated(None, False))
    assert await store.all() == []


async def check_a_change_made_before_a_delete_is_deleted_with_it(store: Any) -> None:
    """The other order: the change applies first, and the delete returns the record it changed."""
    import asyncio

    from pyjobq.core.status import REVIVABLE

    await store.add([make_record("x", status="failed", error="boom"),
                     make_record("y", status="failed", group="g")])
    changed, deleted = await asyncio.gather(store.update(Change("x", _revive, REVIVABLE)),
                                            store.delete_many(["x"]))
    assert changed.applied and deleted == [changed.record]
    changed, deleted = await asyncio.gather(store.update(Change("y", _revive, REVIVABLE)),
                                            store.delete_group("g"))
    assert changed.applied and deleted == [changed.record]
    assert await store.all() == []


async def check_update_by_status_changes_each_record_of_the_statuses_in_one_call(
        store: Any) -> None:
    from pyjobq.core.status import REVIVABLE

    a = make_record("a", created_at=T0 + 2, status="failed", error="boom")
    b = make_record("b", created_at=T0 + 1, status="cancelled")
    keep = make_record("keep", created_at=T0, status="failed", label="keep")
    p, d = make_record("p", created_at=T0 + 3), make_record("d", created_at=T0 + 4, status="done")
    await store.add([a, b, keep, p, d])
    calls: list[str] = []

    def revive_unless_kept(cur: JobRecord) -> JobRecord | None:
        calls.append(cur.id)
        return None if cur.label == "keep" else _revive(cur)

    done = await store.update_by_status(REVIVABLE, revive_unless_kept)
    assert sorted(calls) == ["a", "b", "keep"]  # each once, only those of the statuses
    # oldest first
    assert done == [Updated(keep, False), Updated(_revive(b), True), Updated(_revive(a), True)]
    assert await store.all() == [keep, _revive(b), _revive(a), p, d]
    assert await store.update_by_status(frozenset({Status.PAUSED}), revive_unless_kept) == []


async def check_update_by_status_due_after_reads_only_what_is_due_later(store: Any) -> None:
    """``due_after``: only the records of the statuses due later than it are read and changed
    (the network's return); one due then or sooner (a backlog already due) is not even read,
    nor one of another status due later. Oldest first, as without it."""
    later = make_record("later", created_at=T0 + 2, next_retry_at=T0 + 500)
    soon = make_record("soon", created_at=T0, next_retry_at=T0 + 300)
    due = make_record("due", created_at=T0 + 1, next_retry_at=T0 + 100)
    at = make_record("at", created_at=T0 + 3, next_retry_at=T0 + 200)  # due exactly then
    lease = make_record("lease", created_at=T0 + 4, status="running", next_retry_at=T0 + 900,
                        owner="o")
    await store.add([later, soon, due, at, lease])
    read: list[str] = []

    def now_due(cur: JobRecord) -> JobRecord | None:
        read.append(cur.id)
        return cur.evolve(next_retry_at=T0 + 200, updated_at=T0 + 200)

    done = await store.update_by_status(frozenset({Status.PENDING}), now_due, due_after=T0 + 200)
    assert sorted(read) == ["later", "soon"], read
    assert [(u.record.id if u.record else None, u.applied) for u in done] == [
        ("soon", True), ("later", True)]
    stored = {r.id: r.next_retry_at for r in await store.all()}
    assert stored == {"soon": T0 + 200, "due": T0 + 100, "later": T0 + 200, "at": T0 + 200,
                      "lease": T0 + 900}, stored
    read.clear()
    assert await store.update_by_status(frozenset({Status.PENDING}), now_due,
                                        due_after=T0 + 200) == []
    assert read == []


async def check_update_by_status_all_or_none(store: Any) -> None:
    from pyjobq.core.status import REVIVABLE

    a, b = make_record("a", status="failed"), make_record("b", created_at=T0 + 1, status="failed")
    await store.add([a, b])

    def boom(cur: JobRecord) -> JobRecord:
        if cur.id == "b":
            raise ValueError("no")
        return _revive(cur)

    try:
        await store.update_by_status(REVIVABLE, boom)
    except Exception:
        pass
    else:
        raise AssertionError("a change that raises must fail the whole update_by_status")
    assert await store.all() == [a, b]


async def check_update_by_status_and_calls_around_it_apply_in_call_order(store: Any) -> None:
    """retry_all() then cancel_job(x), not awaited in between: the retry reads and writes in its
    one transaction, so the cancel finds x pending and cancels it. A read of the failed ids
    first and a write after let the cancel land between (refused: x was still failed) and then
    revived x anyway."""
    import asyncio

    from pyjobq.core import policy
    from pyjobq.core.status import REVIVABLE, UNFINISHED

    await store.add([make_record("x", status="failed"),
                     make_record("y", created_at=T0 + 1, status="failed")])
    retried, cancelled = await asyncio.gather(
        store.update_by_status(REVIVABLE, _revive),
        store.update(Change("x", lambda cur: policy.cancel(cur, T0 + 6), UNFINISHED)))
    assert [(u.record.id, u.applied) for u in retried] == [("x", True), ("y", True)]
    assert cancelled.applied
    assert [(r.id, r.status) for r in await store.all()] == [
        ("x", Status.CANCELLED), ("y", Status.PENDING)]
    deleted, retried = await asyncio.gather(store.delete_many(["x"]),
                                            store.update_by_status(REVIVABLE, _revive))
    assert [r.id for r in deleted] == ["x"] and retried == []


# ---------------------------------------------------------------- keys that replace


async def check_add_without_keys_replaces_nothing(store: Any) -> None:
    assert await store.add([make_record("a"), make_record("b", created_at=T0 + 1)]) == []
    assert _ids(await store.all()) == ["a", "b"]


async def check_a_keyed_add_replaces_the_waiting_job_of_its_key_in_its_transaction(
        store: Any) -> None:
    """Pending (due, delayed, in retry backoff) and paused jobs of the key are deleted by the add
    that stores the new one, and returned as they were; other keys, running and finished jobs
    of the key, and jobs with no key are left."""
    due = make_record("due", key="k1")
    delayed = make_record("delayed", created_at=T0 + 1, key="k2", next_retry_at=T0 + 60_000)
    backoff = make_record("backoff", created_at=T0 + 2, key="k3", attempts=2,
                          next_retry_at=T0 + 4_000, error="HTTP 500", http_status=500)
    paused = make_record("paused", created_at=T0 + 3, status="paused", key="k4",
                         yield_lock="fg")
    running = make_record("running", created_at=T0 + 4, status="running", key="k5", owner="s")
    finished = [make_record(f"{s}5", created_at=T0 + 5, status=s, key="k5")
                for s in ("done", "failed", "cancelled")]
    other = make_record("other", created_at=T0 + 6, key="k-other")
    plain = make_record("plain", created_at=T0 + 7)
    before = [due, delayed, backoff, paused, running, *finished, other, plain]
    assert await store.add(before) == []
    new = [make_record(f"new{i}", created_at=T0 + 10 + i, key=f"k{i}") for i in range(1, 6)]
    replaced = await store.add(new)
    assert replaced == [due, delayed, backoff, paused]  # as they were, oldest first
    assert _ids(await store.all()) == ["running", "cancelled5", "done5", "failed5", "other",
                                       "plain", "new1", "new2", "new3", "new4", "new5"]
    assert await store.get("new1") == new[0]
    assert await store.entries(["due", "new1"]) == [Entry.of(new[0])]


async def check_of_two_jobs_of_one_key_in_one_add_the_last_is_stored(store: Any) -> None:
    old = make_record("old", key="k")
    await store.add([old])
    first = make_record("first", created_at=T0 + 1, key="k")
    last = make_record("last", created_at=T0 + 2, key="k")
    assert await store.add([first, make_record("x", created_at=T0 + 3), last]) == [old, first]
    assert _ids(await store.all()) == ["last", "x"]


async def check_a_keyed_add_that_fails_replaces_nothing(store: Any) -> None:
    old = make_record("old", key="k")
    taken = make_record("taken")
    await store.add([old, taken])
    await _raises(KeyError, store.add([make_record("new", created_at=T0 + 1, key="k"),
                                       make_record("taken", created_at=T0 + 2)]))
    assert await store.all() == [old, taken]


async def check_a_replacement_and_a_claim_apply_in_call_order(store: Any) -> None:
    """The claim first (not awaited): the old job is running when the add looks, so it is left
    and the new one waits. The add first: the old job is gone when the claim looks, and the
    claim does not apply."""
    import asyncio

    from pyjobq.core.status import ONLY_PENDING

    def claim(cur: JobRecord) -> JobRecord:
        return cur.evolve(status=Status.RUNNING, next_retry_at=None, owner="s", attempts=1)

    a = make_record("a", key="k")
    await store.add([a])
    claimed, replaced = await asyncio.gather(
        store.update(Change("a", claim, ONLY_PENDING)),
        store.add([make_record("b", created_at=T0 + 1, key="k")]))
    assert claimed.applied and replaced == []
    assert [(r.id, r.status) for r in await store.all()] == [("a", Status.RUNNING),
                                                              ("b", Status.PENDING)]
    c = make_record("c", created_at=T0 + 2, key="k")
    replaced, claimed = await asyncio.gather(
        store.add([c]), store.update(Change("b", claim, ONLY_PENDING)))
    assert _ids(replaced) == ["b"] and not claimed.applied and claimed.record is None
    assert [(r.id, r.status) for r in await store.all()] == [("a", Status.RUNNING),
                                                              ("c", Status.PENDING)]


async def check_delete_many_when_deletes_only_records_of_those_statuses(store: Any) -> None:
    from pyjobq.core.status import REPLACEABLE

    a, b = make_record("a"), make_record("b", created_at=T0 + 1, status="running", owner="s")
    await store.add([a, b])
    assert await store.delete_many(["a", "b", "missing"], when=REPLACEABLE) == [a]
    assert await store.all() == [b]


async def check_update_keyed_decides_on_the_keys_records_as_stored(store: Any) -> None:
    from pyjobq.core import keys
    from pyjobq.core.ports import REPLACE, KeyChange
    from pyjobq.core.status import REPLACEABLE

    def replace_outdated(cur: JobRecord, others: Any) -> Any:
        return REPLACE if keys.outdated(cur, others) else None

    old = make_record("old", key="k")
    gone = make_record("gone", created_at=T0 + 1, key="k", status="cancelled")
    lone = make_record("lone", created_at=T0 + 2, key="j")
    await store.add([old, gone, lone])
    # The only newer record of its key was cancelled: nothing replaces "old".
    done = await store.update_keyed([KeyChange("old", replace_outdated, REPLACEABLE),
                                     KeyChange("lone", replace_outdated, REPLACEABLE),
                                     KeyChange("missing", replace_outdated, REPLACEABLE)])
    assert [u.applied for u in done.updated] == [False, False, False] and done.replaced == []
    # A newer job of the key, stored as running (so its add replaced nothing): "old" goes.
    await store.add([make_record("newer", created_at=T0 + 3, key="k", status="running",
                                 owner="s")])
    done = await store.update_keyed([KeyChange("old", replace_outdated, REPLACEABLE)])
    assert done.updated == [Updated(None, True)] and _ids(done.replaced) == ["old"]
    assert _ids(await store.all()) == ["gone", "lone", "newer"]


async def check_update_keyed_writes_what_it_decided_and_only_within_when(store: Any) -> None:
    from pyjobq.core.ports import KeyChange
    from pyjobq.core.status import ONLY_FAILED

    failed = make_record("f", status="failed", key="k", error="x")
    await store.add([failed])
    seen: list[Any] = []

    def revive(cur: JobRecord, others: Any) -> Any:
        seen.append(list(others))
        return make_record("f", key="k", created_at=T0, attempts=0)

    done = await store.update_keyed([KeyChange("f", revive, ONLY_FAILED)])
    assert seen == [[]] and done.updated[0].applied and done.replaced == []
    assert (await store.get("f")).status is Status.PENDING
    done = await store.update_keyed([KeyChange("f", revive, ONLY_FAILED)])  # pending now
    assert not done.updated[0].applied and len(seen) == 1
    # A second change of one id in the same call is not decided.
    await store.add([make_record("g", status="failed", key="j", error="x")])
    done = await store.update_keyed([KeyChange("g", lambda cur, others: None, ONLY_FAILED),
                                     KeyChange("g", revive, ONLY_FAILED)])
    assert done.updated == [Updated((await store.get("g")), False), Updated(None, False)]
    assert (await store.get("g")).status is Status.FAILED


CHECKS: list[Callable[[Any], Awaitable[None]]] = [
    check_add_then_get,
    check_get_missing_is_none,
    check_add_empty_batch,
    check_add_duplicate_raises_and_adds_none_of_the_batch,
    check_add_same_id_twice_in_one_batch_adds_none,
    check_update_read_modify_write,
    check_update_missing_returns_none_without_calling,
    check_update_returning_none_leaves_it,
    check_delete_many_ignores_missing,
    check_by_status_oldest_first,
    check_by_group_oldest_first,
    check_next_due_at,
    check_next_due_at_counts_leases_and_skips_up_to_after,
    check_next_due_at_counts_only_what_a_pass_could_claim,
    check_all_oldest_first,
    check_returned_records_are_copies,
    check_record_round_trips_every_field,
    check_a_code_member_is_stored_as_its_string,
    check_update_many_in_order_with_preconditions,
    check_update_many_all_or_none,
    check_entries_unfinished_and_by_id,
    check_delete_many_returns_what_it_deleted,
    check_delete_group_deletes_the_group_in_one_call,
    check_a_delete_and_a_change_made_after_it_apply_in_call_order,
    check_a_change_made_before_a_delete_is_deleted_with_it,
    check_update_by_status_changes_each_record_of_the_statuses_in_one_call,
    check_update_by_status_due_after_reads_only_what_is_due_later,
    check_update_by_status_all_or_none,
    check_update_by_status_and_calls_around_it_apply_in_call_order,
    check_add_without_keys_replaces_nothing,
    check_a_keyed_add_replaces_the_waiting_job_of_its_key_in_its_transaction,
    check_of_two_jobs_of_one_key_in_one_add_the_last_is_stored,
    check_a_keyed_add_that_fails_replaces_nothing,
    check_a_replacement_and_a_claim_apply_in_call_order,
    check_delete_many_when_deletes_only_records_of_those_statuses,
    check_update_keyed_decides_on_the_keys_records_as_stored,
    check_update_keyed_writes_what_it_decided_and_only_within_when,
]


# ---------------------------------------------------------------- the ScheduleStore contract
# (pyjobq.core.ports.ScheduleStore): the stores that keep the job queue's schedules.

def _definition(name: str = "s", every_ms: float = 60_000.0, **options: Any) -> Any:
    from pyjobq.core.periodic import ScheduleDefinition

    return ScheduleDefinition(name=name, every_ms=every_ms, type=options.pop("type", name),
                              **options)


def _define_at(now: float, definition: Any) -> Callable[[Any], Any]:
    from pyjobq.core.periodic import define

    return lambda current: define(current, definition, now)


def _occur_at(now: float) -> Callable[[Any, Any], Any]:
    from pyjobq.core.periodic import occurrence

    return lambda current, previous: occurrence(current, previous, now)


async def check_put_schedule_stores_reads_and_changes_it(store: Any) -> None:
    assert await store.schedules() == []
    stored = await store.put_schedule("s", _define_at(T0, _definition()))
    assert stored.definition == _definition() and stored.last_slot == 1_699_999_980_000.0
    assert [s.name for s in await store.schedules()] == ["s"]
    same = await store.put_schedule("s", _define_at(T0 + 5, _definition()))
    assert same == stored  # nothing changed: not written
    changed = await store.put_schedule("s", _define_at(T0 + 9, _definition(every_ms=120_000.0)))
    assert (changed.every_ms, changed.last_slot, changed.created_at, changed.updated_at) == (
        120_000.0, stored.last_slot, T0, T0 + 9)
    await store.put_schedule("a", _define_at(T0, _definition("a", label="first")))
    assert [s.name for s in await store.schedules()] == ["a", "s"]


async def check_delete_schedule_returns_what_it_deleted(store: Any) -> None:
    stored = await store.put_schedule("s", _define_at(T0, _definition()))
    assert await store.delete_schedule("s") == stored
    assert await store.delete_schedule("s") is None
    assert await store.schedules() == []


async def check_advance_schedule_adds_the_job_with_the_advance(store: Any) -> None:
    from pyjobq.core.periodic import occurrence_id

    await store.put_schedule("s", _define_at(T0, _definition()))
    assert await store.advance_schedule("s", _occur_at(T0 + 1)) is None  # no slot due yet
    due = T0 + 60_000.0 * 3
    advanced = await store.advance_schedule("s", _occur_at(due))
    slot = 1_700_000_160_000.0  # the latest slot: the two before it are skipped
    assert advanced.slot == slot and advanced.job.id == occurrence_id("s", slot)
    assert await store.get(advanced.job.id) == advanced.job
    [stored] = await store.schedules()
    assert (stored.last_slot, stored.last_job_id) == (slot, advanced.job.id)
    # The same slot decided again (a second tab, a thawed holder): accounted for, nothing added.
    assert await store.advance_schedule("s", _occur_at(due)) is None
    assert [r.id for r in await store.all()] == [advanced.job.id]
    assert await store.advance_schedule("missing", _occur_at(due)) is None


async def check_advance_schedule_sees_the_previous_job_in_its_transaction(store: Any) -> None:
    await store.put_schedule("s", _define_at(T0, _definition()))
    first = await store.advance_schedule("s", _occur_at(T0 + 60_000.0))
    seen: list[Any] = []

    def decide(current: Any, previous: Any) -> Any:
        seen.append(previous)
        return _occur_at(T0 + 120_000.0)(current, previous)

    skipped = await store.advance_schedule("s", decide)
    assert seen == [first.job] and skipped.job is None  # still pending: coalesced
    await store.update(Change(first.job.id, lambda cur: cur.evolve(
        status=Status.DONE, next_retry_at=None)))
    after = await store.advance_schedule("s", _occur_at(T0 + 180_000.0))
    assert after.job is not None and after.schedule.last_job_id == after.job.id
    await store.delete_many([after.job.id])
    seen.clear()
    again = await store.advance_schedule("s", decide_at(T0 + 240_000.0, seen))
    assert seen == [None] and again.job is not None  # its job deleted: runs again


def decide_at(now: float, seen: list[Any]) -> Callable[[Any, Any], Any]:
    def decide(current: Any, previous: Any) -> Any:
        seen.append(previous)
        return _occur_at(now)(current, previous)
    return decide


async def check_concurrent_advances_take_one_slot_once(store: Any) -> None:
    import asyncio

    await store.put_schedule("s", _define_at(T0, _definition()))
    due = T0 + 60_000.0
    results = await asyncio.gather(*[store.advance_schedule("s", _occur_at(due))
                                     for _ in range(5)])
    assert sum(r is not None for r in results) == 1
    assert len(await store.all()) == 1


async def check_an_advance_that_raises_changes_nothing(store: Any) -> None:
    await store.put_schedule("s", _define_at(T0, _definition()))
    first = await store.advance_schedule("s", _occur_at(T0 + 60_000.0))
    [before] = await store.schedules()

    def boom(current: Any, previous: Any) -> Any:
        raise RuntimeError("boom")

    await _raises(RuntimeError, store.advance_schedule("s", boom))
    # A job id that exists already: the whole transaction fails, the schedule is not advanced.
    from dataclasses import replace

    from pyjobq.core.periodic import Occurrence

    def clash(current: Any, previous: Any) -> Any:
        return Occurrence(replace(current, last_slot=current.last_slot + 60_000.0),
                          first.job, current.last_slot + 60_000.0)

    await _raises(KeyError, store.advance_schedule("s", clash))
    assert await store.schedules() == [before]
    assert [r.id for r in await store.all()] == [first.job.id]


SCHEDULE_CHECKS: list[Callable[[Any], Awaitable[None]]] = [
    check_put_schedule_stores_reads_and_changes_it,
    check_delete_schedule_returns_what_it_deleted,
    check_advance_schedule_adds_the_job_with_the_advance,
    check_advance_schedule_sees_the_previous_job_in_its_transaction,
    check_concurrent_advances_take_one_slot_once,
    check_an_advance_that_raises_changes_nothing,
]
