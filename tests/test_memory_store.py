"""The Store contract suite against MemoryStore, plus what only the memory store offers."""

from __future__ import annotations

import asyncio

import pytest

import store_contract
from pyjobq.memory import MemoryStore


@pytest.mark.parametrize("check", store_contract.CHECKS, ids=lambda c: c.__name__)
def test_memory_store_meets_the_contract(check) -> None:
    asyncio.run(check(MemoryStore()))


def test_every_check_is_listed() -> None:
    names = {n for n in dir(store_contract) if n.startswith("check_")}
    assert names == {c.__name__ for c in store_contract.CHECKS}


def test_raw_shows_the_stored_json() -> None:
    store = MemoryStore()
    record = store_contract.make_record("a")
    asyncio.run(store.add([record]))
    assert store.raw() == {"a": record.to_dict()}
