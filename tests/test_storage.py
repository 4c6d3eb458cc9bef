"""``queue.storage()`` and ``configure(persist_storage=)`` on plain CPython: no browser says
anything, so every field is None; the browser's side (``navigator.storage.persist()`` asked
once a job is stored) is tested in Chromium (tests/e2e/queue.spec.js)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

import pyjobq
from pyjobq import ConfigurationError, StorageState, config
from pyjobq.queue import _storage


def test_without_a_browser_nothing_is_known_of_the_storage() -> None:
    side = SimpleNamespace(resources=SimpleNamespace(storage=None))
    assert asyncio.run(_storage(side)) == StorageState(None, None, None)  # type: ignore[arg-type]


def test_a_browser_s_report_is_what_storage_answers() -> None:
    class Report:
        async def state(self) -> StorageState:
            return StorageState(persisted=True, usage_bytes=10, quota_bytes=100)

    side = SimpleNamespace(resources=SimpleNamespace(storage=Report()))
    assert asyncio.run(_storage(side)) == StorageState(True, 10, 100)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_persist_storage_is_true_or_false(value: object) -> None:
    before = config.settings()
    with pytest.raises(ConfigurationError, match="persist_storage must be True or False"):
        pyjobq.configure(persist_storage=value)  # type: ignore[arg-type]
    assert config.settings() == before and before.persist_storage is True
