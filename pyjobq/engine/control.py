"""The pass loop's control: one object for the four things that steer it.

Runs wherever an engine runs: in the scheduler worker, and in the page — the waiting tab's
request scheduler, the volatile engine and the outbox each have one.

Theory of operation
-------------------
The scheduler's loop (pyjobq/engine/scheduler.py) holds the processor lease for a pass
whenever a pass is *wanted*; the pass (pyjobq/engine/passes.py) waits between its looks
until it is *kicked*; a pass whose lease was *revoked* claims nothing more and returns;
a *stopped* engine runs no pass again. Every part that changes one of these calls a
named method of :class:`PassControl` — nothing else writes them — so a reader finds
every writer by name, and each method says what it means for the loop.
"""

from __future__ import annotations

import asyncio


class PassControl:
    """Whether a pass is wanted, the kick that ends a pass's wait, and the revoked and stopped
    flags; owned by the scheduler, read by its loop and its pass."""

    def __init__(self) -> None:
        self._kick = asyncio.Event()
        self._wanted = False
        self._revoked = False
        self._stopped = False

    @property
    def wanted(self) -> bool:
        """A pass was asked for since the last look (or the last pass began)."""
        return self._wanted

    @property
    def revoked(self) -> bool:
        """The lease was taken away during this pass (the page froze): claim nothing more."""
        return self._revoked

    @property
    def stopped(self) -> bool:
        """The engine stopped: no pass runs again."""
        return self._stopped

    def want(self) -> None:
        """Ask for a pass, and end the wait of a pass that runs: something may be due."""
        self._wanted = True
        self._kick.set()

    def want_again(self) -> None:
        """Ask for another pass once the loop is back (the lease was taken away mid-pass, or
        work fell due since the last look); no pass is waiting to be kicked."""
        self._wanted = True

    def kick(self) -> None:
        """End the pass's wait: it looks again (a run settled or ended, news came)."""
        self._kick.set()

    def revoke(self) -> None:
        """The lease went mid-pass: the pass claims nothing more and returns."""
        self._revoked = True
        self._kick.set()

    def stop(self) -> None:
        """The engine stops: the pass returns, and none runs again."""
        self._stopped = True
        self._kick.set()

    def begin_pass(self) -> None:
        """The loop asks for the lease for a new pass: what was wanted is being done, and
        nothing is revoked yet."""
        self._wanted = False
        self._revoked = False

    def begin_look(self) -> None:
        """A look begins: it sees everything asked for so far, so nothing is wanted or kicked."""
        self._kick.clear()
        self._wanted = False

    async def wait(self) -> None:
        """Until the next kick (one since the look began ends it at once)."""
        await self._kick.wait()
