"""Statuses and the transition table.

A job's status only ever changes through :func:`apply`, which reads the table
below. An event the table does not list for the current status raises
:class:`~pyjobq.errors.IllegalTransition` and changes nothing, so a bug shows up
as an error naming the move rather than as a record in an impossible state.
"""

from __future__ import annotations

import enum

from .errors import IllegalTransition


class Status(str, enum.Enum):
    """A job's status, as ``pyjobq.Status``: a ``str`` enum, so ``status == "done"`` holds too,
    and its ``repr`` is the string's (``'done'``).

    ``pending`` waits to run (maybe until ``next_retry_at``), ``running`` is handed to a
    page, ``paused`` waits on a yield lock or a suspended type; ``done``, ``failed`` and
    ``cancelled`` are terminal (:data:`TERMINAL`): a job's ``done`` resolves on reaching one.
    ``failed`` and ``cancelled`` records are kept until deleted and can be retried.
    """

    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        # As users read it, in an Outcome or a JobUpdate: 'done', not <Status.DONE: 'done'>.
        return repr(self.value)


class Event(str, enum.Enum):
    """What happens to a job; :func:`apply` reads :data:`TRANSITIONS` to move its status."""

    CLAIM = "claim"  # handed to a page to run
    SUCCEED = "succeed"
    RETRY = "retry"  # back to pending with a next_retry_at
    FAIL = "fail"
    RECOVER = "recover"  # a dead page's running record, back to pending
    PARK = "park"  # yielding to a held lock, or a suspended type
    UNPARK = "unpark"
    CANCEL = "cancel"
    REVIVE = "revive"  # retry_all / retry of a failed or cancelled record

    def __str__(self) -> str:
        return self.value


TRANSITIONS: dict[tuple[Status, Event], Status] = {
    (Status.PENDING, Event.CLAIM): Status.RUNNING,
    (Status.PENDING, Event.PARK): Status.PAUSED,
    (Status.PENDING, Event.CANCEL): Status.CANCELLED,
    # The ceiling is checked before hand-off, so a pending job can fail unrun.
    (Status.PENDING, Event.FAIL): Status.FAILED,
    (Status.RUNNING, Event.SUCCEED): Status.DONE,
    (Status.RUNNING, Event.RETRY): Status.PENDING,
    (Status.RUNNING, Event.FAIL): Status.FAILED,
    (Status.RUNNING, Event.RECOVER): Status.PENDING,
    (Status.RUNNING, Event.PARK): Status.PAUSED,
    (Status.RUNNING, Event.CANCEL): Status.CANCELLED,
    (Status.PAUSED, Event.UNPARK): Status.PENDING,
    (Status.PAUSED, Event.CANCEL): Status.CANCELLED,
    (Status.PAUSED, Event.FAIL): Status.FAILED,
    (Status.FAILED, Event.REVIVE): Status.PENDING,
    (Status.CANCELLED, Event.REVIVE): Status.PENDING,
}


# The named sets every module imports (a str enum hashes as its value, so ``"done" in TERMINAL``
# holds for a raw stored string too: the stores need no sets of values of their own).

#: Every status this version knows; a stored record with another is a newer pyjobq's (foreign).
KNOWN = frozenset(Status)
#: Statuses a job never leaves on its own; ``done`` resolves on reaching one.
TERMINAL = frozenset({Status.DONE, Status.FAILED, Status.CANCELLED})
#: The rest: what a pass looks at (the queue's view holds these), what ``cancel_job`` can stop.
UNFINISHED = frozenset(Status) - TERMINAL
#: What ``retry_job`` / ``retry_all`` revive: the statuses the table lets take ``revive``.
REVIVABLE = frozenset(status for status, event in TRANSITIONS if event is Event.REVIVE)
#: What a claim may take, and the statuses whose ``next_retry_at`` means "not before": pending,
#: and (on leases, the outbox mode) a running record whose lease runs out then.
CLAIMABLE = frozenset({Status.PENDING, Status.RUNNING})
#: What a newer job of the same key replaces (keys that replace, ``Store.add``): a job that
#: waits to run — pending (delayed, or in retry backoff too) or paused.
REPLACEABLE = frozenset({Status.PENDING, Status.PAUSED})
#: One status alone: the ``when`` of a :class:`~pyjobq.core.ports.Change` that expects it.
ONLY_PENDING = frozenset({Status.PENDING})
ONLY_RUNNING = frozenset({Status.RUNNING})
ONLY_PAUSED = frozenset({Status.PAUSED})
ONLY_FAILED = frozenset({Status.FAILED})
ONLY_DONE = frozenset({Status.DONE})


def apply(status: Status | str, event: Event | str) -> Status:
    """Return the status that ``event`` moves ``status`` to.

    Raises:
        IllegalTransition: the table has no such move. Nothing is changed.
    """
    try:
        key = (Status(status), Event(event))
    except ValueError:
        raise IllegalTransition(str(status), str(event)) from None
    try:
        return TRANSITIONS[key]
    except KeyError:
        raise IllegalTransition(str(key[0]), str(key[1])) from None
