"""The Store contract suite against MemoryStore, plus what only the memory store offers."""

from __future__ import annotations


import pytest

import store_contract
from pyjobq.core.status import Status
from pyjobq.memory import MemoryStore, VolatileStore
from pyjobq.testing import run


@pytest.mark.parametrize("check", store_contract.CHECKS, ids=lambda c: c.__name__)
def test_memory_store_meets_the_contract(check) -> None:
    run(check(MemoryStore()))


#: The volatile store holds the engine's own frozen records as they are: no structured copies,
#: so the one check about copies does not apply (nothing else holds a volatile record).
SHARES_RECORDS = {"check_returned_records_are_copies"}


@pytest.mark.parametrize("check", [c for c in store_contract.CHECKS if c.__name__ not in SHARES_RECORDS],
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
    assert names == {c.__name__ for c in store_contract.CHECKS}


def test_raw_shows_the_stored_json() -> None:
    store = MemoryStore()
    record = store_contract.make_record("a")
    run(store.add([record]))
    assert store.raw() == {"a": record.to_dict()}


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
