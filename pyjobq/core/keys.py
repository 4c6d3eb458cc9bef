"""Keys that replace: which job of a key may be sent, decided on what the store holds.

Theory of operation
-------------------
A job filed with a ``key`` replaces the waiting jobs of its key (``Store.add``), so that only
the newest of a key is sent: *the newest lands last*. Two moments decide besides the add, and
both decide inside the transaction that writes (:meth:`pyjobq.core.ports.Store.update_keyed`),
on the key's records as stored — never on a view that learns other tabs' changes by news:

- :func:`outdated`: a waiting record behind a newer *unfinished* one of its key is replaced
  (the pass's look). A newer one that was cancelled or deleted meanwhile replaces nothing: the
  older is again the newest that may land.
- :func:`landed_over`: a revival (``retry_job``, ``retry_all``) of a record with a newer record
  of its key that did not end cancelled — done, failed, or still to run — ends it as replaced
  instead of sending it over the newer one. A newer one the user cancelled withdrew itself, so
  the older may be revived.

Order within a key is ``(created_at, id)``, the order the view and the stores list records in.
"""

from __future__ import annotations

from typing import Sequence

from .records import JobRecord
from .status import REPLACEABLE, UNFINISHED, Status


def _newer(record: JobRecord, others: Sequence[JobRecord]) -> list[JobRecord]:
    mine = (record.created_at, record.id)
    return [o for o in others if o.id != record.id and o.key == record.key
            and (o.created_at, o.id) > mine]


def outdated(record: JobRecord, others: Sequence[JobRecord]) -> bool:
    """Whether waiting ``record`` is behind a newer unfinished record of its key (``others``:
    its key's records as stored)."""
    return record.key is not None and record.status in REPLACEABLE \
        and any(o.status in UNFINISHED for o in _newer(record, others))


def landed_over(record: JobRecord, others: Sequence[JobRecord]) -> bool:
    """Whether reviving ``record`` would send it over a newer job of its key: one stored that did
    not end cancelled."""
    return record.key is not None \
        and any(o.status is not Status.CANCELLED for o in _newer(record, others))
