"""Every error pyjobq raises derives from PyjobqError, and each is importable on plain CPython:
the lock manager's LockStolen and the IndexedDB store's StorageError too (that pyjobq.errors
imports no browser module: tests/core/test_import.py)."""

from __future__ import annotations

import asyncio

import pytest

import pyjobq
import pyjobq.errors
from pyjobq import PyjobqError
from pyjobq.memory import LockHub
from pyjobq.testing import run, settle


def test_storage_errors_are_pyjobq_errors_importable_on_cpython() -> None:
    from pyjobq.errors import DatabaseUpgradedError, StorageError

    assert pyjobq.StorageError is StorageError and "StorageError" in pyjobq.__all__
    assert issubclass(StorageError, PyjobqError) and issubclass(DatabaseUpgradedError, StorageError)
    with pytest.raises(PyjobqError, match="quota"):
        raise StorageError("IndexedDB add failed: QuotaExceededError: quota.")


def test_lock_stolen_is_a_pyjobq_error_where_it_always_was() -> None:
    from pyjobq.core.ports import LockStolen

    assert LockStolen is pyjobq.errors.LockStolen and issubclass(LockStolen, PyjobqError)


def test_a_stolen_fake_lock_is_caught_as_a_pyjobq_error() -> None:
    async def main() -> None:
        hub, held = LockHub(), asyncio.Event()

        async def hold(_lock: object) -> None:
            await held.wait()

        victim = asyncio.ensure_future(hub.client().request("L", hold))
        await settle()
        thief = asyncio.ensure_future(hub.client().request("L", hold, steal=True))
        await settle()
        with pytest.raises(PyjobqError, match="'L' was stolen"):
            await victim
        held.set()
        await thief
    run(main())


def test_every_error_class_derives_from_pyjobq_error() -> None:
    classes = [value for value in vars(pyjobq.errors).values()
               if isinstance(value, type) and issubclass(value, BaseException)]
    assert {c.__name__ for c in classes} >= {"LockStolen", "StorageError", "DatabaseUpgradedError"}
    assert [c.__name__ for c in classes if not issubclass(c, PyjobqError)] == []
