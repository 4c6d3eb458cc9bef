"""Storage that is kept: :class:`BrowserStorage` asks the browser to persist the origin's storage
when the queue first hears of a stored job, and answers ``queue.storage()``.

A browser may evict an origin's IndexedDB under storage pressure, and WebKit (every browser on
iOS, and Safari) deletes the storage of an origin not visited for days unless it is persisted:
the stored jobs would go with it. ``navigator.storage.persist()`` asks for it once, on a page's
main thread only (a worker has no ``persist``), and not before a job exists, so a page that
never files one asks nothing. Firefox asks the user (a prompt); Chromium and WebKit decide by
themselves. The answer is said once on the console, and ``queue.storage()`` reads the state
now: ``persisted()`` and ``estimate()``, each given :data:`ANSWER_WITHIN_S` to answer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import js  # type: ignore[import-not-found]

from ..executor.side import ExecutorSide
from ..handle import JobUpdate, StorageState
from ..loop import TaskSet
from . import lifecycle

log = logging.getLogger("pyjobq")

#: How long ``queue.storage()`` waits for each of the browser's answers: a browser that never
#: settles its promise (a prompt nobody answers) reads as "not known".
ANSWER_WITHIN_S = 5.0


class BrowserStorage:
    """The origin's storage as this page sees it; :meth:`start` asks once a job exists."""

    def __init__(self, ask: bool) -> None:
        self._ask = ask and lifecycle.has_document() and hasattr(_manager(), "persist")
        self._asked = False
        self._tasks = TaskSet(log, "pyjobq: asking to persist the storage failed")
        self._unsubscribe: Callable[[], None] | None = None

    def start(self, side: ExecutorSide) -> None:
        """Ask on the first news of a stored job (this tab's or another's)."""
        if self._ask:
            self._unsubscribe = side.on_update(self._heard)

    def _heard(self, update: JobUpdate) -> None:
        if self._asked or update.get("volatile") or update.get("deleted"):
            return
        self._asked = True
        if self._unsubscribe is not None:
            self._unsubscribe()
        self._tasks.spawn(self._persist())

    async def _persist(self) -> None:
        try:
            granted = bool(await _manager().persist())
        except Exception as exc:  # a browser that refuses the call says nothing more
            log.info("pyjobq: navigator.storage.persist() failed: %s", exc)
            return
        _say(granted)

    async def state(self) -> StorageState:
        """The storage's state now (each answer None where the browser gave none in time)."""
        manager = _manager()
        if manager is None:
            return StorageState(persisted=None, usage_bytes=None, quota_bytes=None)
        persisted = await _answer(manager, "persisted")
        estimate = await _answer(manager, "estimate")
        return StorageState(
            persisted=persisted if isinstance(persisted, bool) else None,
            usage_bytes=_count(getattr(estimate, "usage", None)),
            quota_bytes=_count(getattr(estimate, "quota", None)))


def _manager() -> Any:
    navigator = getattr(js.globalThis, "navigator", None)
    return getattr(navigator, "storage", None) if navigator is not None else None


async def _answer(manager: Any, method: str) -> Any:
    call = getattr(manager, method, None)
    if call is None:
        return None
    try:
        return await asyncio.wait_for(call(), ANSWER_WITHIN_S)
    except Exception:  # no answer in time, or one that is an error: not known
        return None


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and value >= 0 else None


def _say(granted: bool) -> None:
    """The browser's answer, once, on the console (where no Python logging is set up too)."""
    text = ("pyjobq: the browser keeps this origin's storage (persisted): stored jobs are not "
            "evicted" if granted else
            "pyjobq: this origin's storage is not persisted: the browser may evict the stored "
            "jobs under storage pressure, and WebKit after days without a visit "
            "(queue.storage() says the state)")
    try:
        js.console.info(text)
    except Exception:
        log.info("%s", text)
