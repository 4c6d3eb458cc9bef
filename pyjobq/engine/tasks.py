"""Background tasks that are kept alive until they finish, and whose failures are logged.

Every engine's (in the scheduler worker and in the page), and the outbox's own.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Coroutine, Iterator


class TaskSet:
    """Fire-and-forget tasks held by strong references (asyncio keeps only weak ones), with
    an exception logged as ``message`` rather than lost as "never retrieved"."""

    def __init__(self, logger: logging.Logger, message: str) -> None:
        self._log = logger
        self._message = message
        self._tasks: set[asyncio.Future[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any] | asyncio.Future[Any]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._reap)
        return task

    def _reap(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._log.error(self._message, exc_info=task.exception())

    def __iter__(self) -> Iterator[asyncio.Future[Any]]:
        return iter(list(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)
