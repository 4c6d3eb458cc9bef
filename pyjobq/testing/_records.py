"""Stored job records for tests, and ids a test can predict."""

from __future__ import annotations

import importlib
import itertools
from types import TracebackType
from typing import Any, Callable

from ..core.records import FETCH, JobRecord, NewJob
from ..core.status import Status

__all__ = ["record", "sequential_ids", "T0"]

#: The time :func:`record` stamps by default, and :class:`~pyjobq.testing.FakeClock`'s start
#: (ms since the epoch: 14 November 2023).
T0 = 1_700_000_000_000.0

_UNSET: Any = object()


def record(job_id: str = "j1", *, type: str = "t", status: Status | str = Status.PENDING,
           created_at: float = T0, reconstructor: str = FETCH, params: Any = _UNSET,
           group: str | None = None, label: str | None = None, next_retry_at: float | None = _UNSET,
           **changes: Any) -> JobRecord:
    """A stored job record, as the queue would have written it, with the fields you name.

    It starts as a job enqueued at ``created_at`` (attempts 0, ``updated_at`` equal to
    ``created_at``) and then takes ``status`` and every other field in ``changes``
    (``attempts``, ``error``, ``code``, ``owner`` …, any :class:`~pyjobq.core.records.JobRecord`
    field). Write it with ``await world.store.add(...)``-like calls or compare it with what a
    store holds; ``.to_dict()`` is its stored (IndexedDB) form.

    Args:
        job_id: the record's id.
        type: the job type (its lane).
        status: a :class:`~pyjobq.core.status.Status` or its string.
        reconstructor: how the job is rebuilt; default ``"fetch"``.
        params: the reconstructor's params; default, for a fetch job,
            ``{"method": "POST", "path": "/<job_id>", "body": None}``, else None.
        next_retry_at: default ``created_at`` while pending, else None (as the queue keeps it).

    Raises:
        ValueError: ``status`` is not a status.
    """
    if params is _UNSET:
        params = ({"method": "POST", "path": f"/{job_id}", "body": None} if reconstructor == FETCH
                  else None)
    status = Status(status)
    if next_retry_at is _UNSET:
        next_retry_at = created_at if status is Status.PENDING else None
    new = NewJob(id=job_id, reconstructor=reconstructor, type=type, group=group, label=label,
                 params=params)
    return new.to_record(created_at).evolve(status=status, next_retry_at=next_retry_at, **changes)


class sequential_ids:
    """Make the ids pyjobq gives jobs, requests and tabs predictable, while active.

    A context manager: inside it, every new id is ``prefix`` and a counter (``id50000``,
    ``id50001`` …; counting down with ``descending=True``), so a failing seeded test replays
    exactly and a test can name the id a job will get. Restores the random ids on exit.

    >>> with sequential_ids():
    ...     job = tab.queue.enqueue_fetch("POST", "/notes")   # doctest: +SKIP
    ...     assert job.id == "id50000"                        # doctest: +SKIP
    """

    #: The modules whose ``new_id`` is replaced (each imported it by name).
    MODULES = ("pyjobq.core.records", "pyjobq.executor.side", "pyjobq.executor.client",
               "pyjobq.outbox", "pyjobq.hosts")

    def __init__(self, *, start: int = 50_000, descending: bool = False,
                 prefix: str = "id") -> None:
        self._start, self._step, self._prefix = start, -1 if descending else 1, prefix
        self._saved: dict[Any, Callable[[], str]] = {}

    def __enter__(self) -> "sequential_ids":
        counter = itertools.count(self._start, self._step)

        def new_id() -> str:
            return f"{self._prefix}{next(counter):05d}"

        for name in self.MODULES:
            module = importlib.import_module(name)
            self._saved[module] = module.new_id
            module.new_id = new_id  # type: ignore[attr-defined]
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for module, saved in self._saved.items():
            module.new_id = saved
        self._saved.clear()
