"""The pure core of pyjobq: records, statuses, the retry policy, the scheduler's decisions and the
jobs table.

Nothing in this package touches IndexedDB, a lock, a channel, a timer or the clock.
Time and randomness are arguments; storage and the browser come in through the
ports in :mod:`pyjobq.core.ports`. It imports on plain CPython.
"""

from . import status as _status
from .backoff import Backoff, make_backoff
from .codes import Code
from .outcome import Outcome
from .records import JobRecord, NewJob, RecordError
from .status import Event, Status, apply

TERMINAL = _status.TERMINAL
"""The statuses a job never leaves on its own (``done``, ``failed``, ``cancelled``): a job's
``done`` resolves on reaching one."""

__all__ = [
    "Backoff",
    "Code",
    "Event",
    "JobRecord",
    "NewJob",
    "Outcome",
    "RecordError",
    "Status",
    "TERMINAL",
    "apply",
    "make_backoff",
]
