"""Old names of the simulated tabs, kept for branches written before issue 16: the kit is
:mod:`pyjobq.testing` (import from there in new tests)."""

from pyjobq.core.ports import LockStolen  # noqa: F401
from pyjobq.testing import (  # noqa: F401
    CHANNEL, LOCK, FreezableChannel, FreezableClock, GuardedStore, Tab, World, settle,
)
from pyjobq.testing import run as run_checked  # noqa: F401
from pyjobq.testing import sequential_ids as DeterministicIds  # noqa: F401
