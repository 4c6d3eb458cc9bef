"""The Store contract suite against MemoryStore, plus what only the memory store offers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import store_contract
from pyjobq.core.status import Status
from pyjobq.memory import MemoryStore, VolatileStore
from pyjobq.testing import run


@pytest.mark.parametrize("yields", [0, 3], ids=["at_once", "yielding"])
@pytest.mark.parametrize("check", store_contract.CHECKS, ids=lambda c: c.__name__)
def test_memory_store_meets_the_contract(check, yields: int) -> None:
    run(check(MemoryStore(yields=yields)))


#: The volatile store holds the engine's own frozen records as they are: no structured copies,
#: so the one check about copies does not apply (nothing else holds a volatile record).
SHARES_RECORDS = {"check_returned_records_are_copies"}


@pytest.mark.parametrize("check",
                         [c for c in store_contract.CHECKS if c.__name__ not in SHARES_RECORDS],
                         ids=lambda c: c.__name__)
def test_volatile_store_meets_the_contract(check) -> None:
    run(check(VolatileStore(forget_done=False)))


def test_volatile_store_forgets_done_records_and_keeps_failed_ones() -> None:
    async def main() -> None:
        store = VolatileStore()
        a, b = store_contract.make_record("a"), store_contract.make_record("b")
        await store.add([a, b])
        done = a.evolve(status=Status.DONE, next_retry_at=None)
        failed = b.evolve(status=Status.FAILED, next_retry_at=None)
        assert await store.update(store_contract.Change("a", lambda cur: done)) \
            == store_contract.Updated(done, True)  # what the engine publishes
        [updated] = await store.update_many([store_contract.Change("b", lambda cur: failed)])
        assert updated.applied and updated.record == failed
        assert await store.get("a") is None and await store.all() == [failed]
    run(main)


def test_every_check_is_listed() -> None:
    names = {n for n in dir(store_contract) if n.startswith("check_")}
    assert names == {c.__name__ for c in store_contract.CHECKS + store_contract.SCHEDULE_CHECKS}


def test_raw_shows_the_stored_json() -> None:
    store = MemoryStore()
    record = store_contract.make_record("a")
    run(store.add([record]))
    assert store.raw() == {"a": record.to_dict()}


# ------------------------------------------------------------ a store that yields as IndexedDB does

def _revive(cur: store_contract.JobRecord) -> store_contract.JobRecord:
    from pyjobq.core import policy

    return policy.revive(cur, store_contract.T0 + 1)


async def _two_call_delete(store: MemoryStore, job_ids: list[str]) -> list[str]:
    """The shape ``_delete`` had: read what exists in one transaction, delete it in another."""
    existing = [r for r in [await store.get(i) for i in job_ids] if r is not None]
    await store.delete_many([r.id for r in existing])
    return [r.id for r in existing]


def test_a_yielding_store_lets_a_retry_in_between_two_calls_of_a_delete_and_loses_it() -> None:
    """The fault the simulation needs: with ``yields``, a change issued after a two-call delete
    lands between its read and its delete. The retry answers that it applied, yet the record
    is gone: the retry is lost. Without yields the same code never shows it."""
    from pyjobq.core.status import REVIVABLE

    async def race(store: MemoryStore) -> tuple[list[str], bool, list[str]]:
        await store.add([store_contract.make_record("x", status="failed", error="boom")])
        deleted, retried = await asyncio.gather(
            _two_call_delete(store, ["x"]),
            store.update(store_contract.Change("x", _revive, REVIVABLE)))
        return deleted, retried.applied, [r.id for r in await store.all()]

    assert run(race(MemoryStore())) == (["x"], False, [])  # never yields: the delete runs whole
    # the retry said yes, and is lost
    assert run(race(MemoryStore(yields=True))) == (["x"], True, [])


def test_a_yielding_store_begins_its_calls_in_the_order_they_were_made() -> None:
    async def main() -> None:
        store = MemoryStore(yields=3)
        order: list[str] = []

        def mark(name: str) -> Any:
            def apply(cur: store_contract.JobRecord) -> store_contract.JobRecord:
                order.append(name)
                return cur.evolve(label=name)
            return apply

        await store.add([store_contract.make_record("a")])
        first = asyncio.ensure_future(store.update(store_contract.Change("a", mark("first"))))
        await asyncio.sleep(0)  # the first has begun yielding: a second call still goes after it
        second = asyncio.ensure_future(store.update(store_contract.Change("a", mark("second"))))
        assert not first.done()  # it gave the loop away before beginning
        await asyncio.gather(first, second)
        assert order == ["first", "second"] and (await store.get("a")).label == "second"
    run(main)


def test_yields_must_be_a_count() -> None:
    for bad in (-1, 1.5, "2"):
        with pytest.raises(ValueError, match="yields must be an int >= 0"):
            MemoryStore(yields=bad)  # type: ignore[arg-type]
    assert MemoryStore(yields=True).yields == 1 and MemoryStore().yields == 0


def test_next_due_at_skips_a_foreign_status_and_a_time_that_is_no_moment() -> None:
    """What only a raw write can store (the IndexedDB twin: tests/browser/test_idb_store.py)."""
    async def main() -> None:
        store = MemoryStore()
        base = store_contract.make_record("x").to_dict()
        store.put_raw({**base, "id": "newer", "status": "snoozed", "next_retry_at": 1.0})
        store.put_raw({**base, "id": "never", "next_retry_at": float("-inf")})
        assert await store.next_due_at() is None
        await store.add([store_contract.make_record("due", next_retry_at=store_contract.T0 + 5)])
        assert await store.next_due_at() == store_contract.T0 + 5
    run(main)


@pytest.mark.parametrize("yields", [0, 3], ids=["at_once", "yielding"])
@pytest.mark.parametrize("check", store_contract.SCHEDULE_CHECKS, ids=lambda c: c.__name__)
def test_memory_store_meets_the_schedule_contract(check, yields: int) -> None:
    run(check(MemoryStore(yields=yields)))
