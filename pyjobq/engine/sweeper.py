"""The lease holder's retention sweep: carries out :mod:`pyjobq.core.retention`'s decisions.

Where it runs: the periodic sweep (:class:`Sweeper`) only in the job queue's mode, on the
lease holder — the scheduler worker; it is inert in the page's volatile engine and outbox.
:func:`sweep` also answers ``cleanup_old``, which any engine's request table runs: in the
worker, or in the page on the waiting tab's request scheduler.

The scheduler calls :meth:`Sweeper.look` each time round its pass (only the lease holder
makes passes), so the first look after taking the lease sweeps, and a timer wakes the
scheduler when the next sweep is due. A sweep reads the ``done`` index, deletes what
:func:`~pyjobq.core.retention.sweepable` names in one batched transaction
(``Store.delete_many``) and publishes the deletions, so open job tables drop the rows.
"""

from __future__ import annotations

import functools
import logging
from typing import Callable, Sequence

from ..core.mode import Mode
from ..core.ports import Change, Clock, Store, Timer
from ..core.records import JobRecord
from ..core.retention import SWEEP_EVERY_MS, clamped, stamped_ahead, sweep_due, sweepable
from ..core.status import ONLY_DONE, ONLY_FAILED, Status

log = logging.getLogger("pyjobq")


async def sweep(store: Store, now: float, retention_ms: float,
                publish: Callable[[Sequence[JobRecord]], None],
                failed_ms: float | None = None) -> int:
    """Delete the ``done`` records older than ``retention_ms`` in one transaction, publish them
    as deleted; returns how many. A ``done`` record stamped after ``now`` is stamped ``now``
    (:func:`~pyjobq.core.retention.stamped_ahead`), so it is swept in its turn. With
    ``failed_ms``, the ``failed`` records older than that too, in one more transaction that
    deletes each only if it is failed still (one retried meanwhile stays)."""
    swept = 0
    if failed_ms is not None:
        failed = sweepable(await store.by_status(Status.FAILED), now, failed_ms, Status.FAILED)
        if failed:
            gone = await store.delete_many([r.id for r in failed], when=ONLY_FAILED)
            if gone:
                publish(gone)
            swept += len(gone)
    return swept + await _sweep_done(store, now, retention_ms, publish)


async def _sweep_done(store: Store, now: float, retention_ms: float,
                      publish: Callable[[Sequence[JobRecord]], None]) -> int:
    done = await store.by_status(Status.DONE)
    ahead = stamped_ahead(done, now)
    if ahead:
        await store.update_many([Change(r.id, functools.partial(clamped, now=now), ONLY_DONE)
                                 for r in ahead])
    old = sweepable(done, now, retention_ms)
    if old:
        await store.delete_many([r.id for r in old])
        publish(old)
    return len(old)


class Sweeper:
    """When and how a scheduler sweeps; inert when ``retention_ms`` is None
    (volatile jobs, the outbox)."""

    def __init__(self, mode: Mode, *, store: Store, clock: Clock,
                 publish: Callable[[Sequence[JobRecord]], None], wake: Callable[[], None],
                 every_ms: float = SWEEP_EVERY_MS) -> None:
        #: ``done`` records are kept this long, ``failed`` ones ``_failed_ms`` (None: for good).
        self._retention_ms = mode.retention_ms
        self._failed_ms = mode.failed_retention_ms
        self._store = store
        self._clock = clock
        self._publish = publish
        self._wake = wake
        self._every_ms = every_ms
        self._last_swept_at: float | None = None
        self._timer: Timer | None = None
        self._stopped = False

    async def look(self) -> None:
        """From inside a pass: sweep if one is due, then arm the wake for the next."""
        if self._retention_ms is None or self._stopped:
            return
        now = self._clock.now()
        if not sweep_due(self._last_swept_at, now, self._every_ms):
            return
        self._last_swept_at = now
        try:
            count = await sweep(self._store, now, self._retention_ms, self._publish,
                                self._failed_ms)
        except Exception as exc:  # the sweep's trouble is its own: the pass goes on
            log.warning("pyjobq: the retention sweep failed (%s): tried again in %g min", exc,
                        self._every_ms / 60_000)
            count = 0
        if count:
            log.info("pyjobq swept %d finished record(s) past their retention", count)
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._clock.call_later(self._every_ms, self._due)

    def _due(self) -> None:
        self._timer = None
        self._wake()

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
