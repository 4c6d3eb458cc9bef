"""The processor lease, held by the scheduler or by its page — and frozen tabs.

Where each part runs: :class:`LinkLease` and :class:`HostLease` in the scheduler worker;
:class:`LeaseHolder`, :class:`LeaseWatch` and :func:`watch_in_line` in the page, which holds
the lock for its worker; :class:`NeverLease` on the page's waiting-tab request scheduler;
:class:`GateLease` the outbox's; :class:`ServiceWorkerLease` the Service Worker's drain
(pyjobq/service_worker/drain.py); :class:`LockLease` an engine that holds its own lock (tests,
the volatile engine). The volatile engine in the page takes the default :class:`LockLease` on
a lock manager of its own. Every processor lease is here; an outbox entry's lease is a claim
on its record (pyjobq/core/outbox_claims.py).

Theory of operation
-------------------
This is where pyjobq explains what a frozen or back/forward-cached tab does to the queue;
the scheduler, the run locks, the lifecycle handlers and docs/decisions.md point here.
docs/decisions.md, "Frozen and back/forward-cached tabs", has what was measured in Chromium.

Only the holder of the processor lease claims jobs (spec: "Preventing duplicate
execution across tabs"). A page that is frozen (``freeze``) or put in the back/forward
cache (``pagehide``) keeps its Web Locks, and its dedicated worker is frozen with it, so a
lease its worker held would stop the queue for every tab while that tab sits frozen. Where
the lease lives is therefore a port (:class:`~pyjobq.core.ports.Lease`):

* :class:`LockLease` — the scheduler holds the Web Lock itself. Right for an
  executor side with no document (a JupyterLite kernel, a PyScript worker): it is
  never frozen on its own, and a closed or crashed one releases the lock.
* :class:`LinkLease` + :class:`LeaseHolder` — the *page* holds the lock for its
  worker, and lets go synchronously inside its ``freeze``/``pagehide`` handler
  (pyjobq/browser/lifecycle.py), which releases it while the page is frozen (measured);
  a worker cannot be relied on to (it freezes too, and releases only from a later
  asyncio callback). ``resume``/``pageshow`` ask for it again. A revoked pass claims
  nothing more, returns at once and asks for the lease again.

**A tab that takes the lease keeps it for its life** (until it closes, crashes, freezes or is
hidden into the back/forward cache), not just for one drain: the other tabs wait in the lock's
queue with a worker that has not loaded Pyodide at all (docs/decisions.md, "Waiting tabs"), and
a lease that went back to the queue after every drain would wake one of them — and its 160 MB
Pyodide — for nothing. The holder learns of the waiting tabs' enqueues from their
``job-update`` news on the channel (they store their own requests, pyjobq/browser/page_main.py).
So :class:`LeaseHolder` keeps the lock between the worker's drains, and a worker host keeps it
in its bootstrap for as long as it lives (:class:`HostLease`).

The messages (all on the worker link, which is FIFO)::

    worker -> page   lease_request             take the lock for me
    page -> worker   lease_granted{epoch}      I hold it; grant number epoch
    worker -> page   lease_released{epoch}     done with it (or: I saw it revoked)
    page -> worker   lease_revoked{epoch}      I let it go (freeze/pagehide)

After a revocation the page refuses ``run`` until the worker's ``lease_released``
for that epoch arrives: a run the worker claimed before it learnt of the
revocation is answered as interrupted (code ``lease_revoked``), which gives its attempt
back and leaves it pending for whoever holds the lease now.

**What makes that safe is the run lock.** Runs already on the page carry on through the
freeze. Before claiming a job the scheduler takes ``<lock_name>:run:["<type>","<job id>"]``
(``ifAvailable``, :func:`pyjobq.core.lanes.run_lock`, pyjobq/engine/runlocks.py) and holds it until
the run's outcome is stored. Recovery skips running records whose run lock is held, and a
type with such a record is busy in the lanes, so the tab that takes the lease from a frozen
one neither runs the frozen job a second time nor starts a second job of its type; the
frozen tab finishes it on resume and stores the outcome as its owner. A frozen document
keeps its run locks; a discarded one releases them, and its running records are then
ordinary orphans the next holder recovers (the dead run spending an attempt, as for a
crash) — so a frozen run is neither doubled nor lost. A recovery write applies only to the
record judged orphaned (same owner, ``updated_at`` and attempts), so a page frozen between
its look and its write cannot recover a run another tab claimed meanwhile
(pyjobq/engine/passes.py). The run locks live on the worker, not the page: a lock only has to
*stay* held while frozen and *go* when the document is discarded, and a worker's does both;
only releasing on freeze needed the page. The outbox (lease mode) and the in-tab volatile
engine take no run locks: nothing recovers their running records by lock.

**A holder that cannot let go is taken over: the lease watch.** A worker host (a notebook
kernel, a PyScript worker) has no ``freeze`` event: frozen with its page, it keeps the lock, and the
origin's queue would stop until it thaws — hours, perhaps. So every tab in line for the lease asks,
on the lease channel (``<channel>:lease``), whether the holder is alive (``lease_ping`` every
``PING_MS``); the holder answers (``lease_pong``) from the thread that holds the lock — the page for
a page-held lease, the worker for a worker host's — and a frozen one cannot. After ``SILENT_PINGS``
pings in a row with none answered (about a minute) the tab says so (``lease_stolen``, so the others
count the new holder's silence from zero) and takes the lock with ``steal: true``
(:class:`LeaseWatch`). Pings are counted, not time: a waiting tab that was frozen itself resumes one
ping further on, not a minute. The holder learns that its lock was taken when it runs again — a
thawed page or worker — revokes its pass like a freeze, and gets back in line
(:meth:`LeaseHolder.stolen`, :class:`HostLease`). That is safe for the same reason a freeze is: the
silent holder's runs keep their run locks, so none is recovered or doubled and their types stay busy
everywhere; and until the thawed holder has heard, a claim it makes is checked against the run locks
others hold after its own are taken, so two holders never start one type side by side
(pyjobq/engine/passes.py, :meth:`Pass._claims_alone`). A holder that is only busy for a minute (a
page computing) is taken over the same way, which costs it nothing it was using: a busy page grants
its worker nothing and hands out no run.

Simpler schemes fail: a worker-held lease is not released while frozen; a page-held
lease without run locks lets the next holder recover — and so double — the frozen run;
recovering by a time limit would bound runs, which the spec forbids ("Only the handshake
is bounded").
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Protocol

from ..core.messages import make
from ..core.ports import Channel, Clock, Link, LockManager, Timer, Unsubscribe
from ..core.router import Router

log = logging.getLogger("pyjobq")

#: The link messages of the page-held lease; the scheduler and executor side leave them to
#: this module.
LEASE_MESSAGES = frozenset({"lease_request", "lease_granted", "lease_revoked", "lease_released",
                            "lease_steal"})

#: How often a tab in line for the lease asks its holder whether it is alive (:class:`LeaseWatch`).
PING_MS = 10_000.0
#: Pings in a row the holder leaves unanswered before a tab in line takes the lease from it.
SILENT_PINGS = 6


def lease_channel_name(lock_name: str) -> str:
    """The channel the lease's pings travel on, named after the lease's lock: two queues of one
    origin (their own locks, maybe one news channel) never hear each other's pings; and beside
    the news channel, not on it (a tab of an older pyjobq would log each ping it does not
    know)."""
    return f"{lock_name}:lease"


class Grab(Protocol):
    """Request the exclusive lock ``name``; once it is held call ``on_granted(release)``, where
    ``release()`` lets it go at once (inside a ``freeze`` handler, before the page stops).
    ``steal``: take it from its holder now. ``on_stolen()`` is called if it is taken from us
    while held. Returns ``cancel()``, which drops a request not yet granted."""

    def __call__(self, name: str, on_granted: Callable[[Callable[[], None]], None], *,
                 steal: bool = False,
                 on_stolen: Callable[[], None] | None = None) -> Callable[[], None]: ...


class _Arming:
    """A watch's timer between a ping and the turn that arms the next."""

    def cancel(self) -> None:
        pass


_ARMING = _Arming()


class LeaseWatch:
    """In line for the lease: ask the holder whether it is alive, and take the lease from a
    silent one (the theory above). ``waiting()`` starts the pings, ``holding()`` stops them."""

    def __init__(self, channel: Channel, clock: Clock, source: str,
                 steal: Callable[[], None]) -> None:
        self._channel = channel
        self._clock = clock
        self._source = source
        self._steal = steal
        self._timer: Timer | None = None
        self._answered = True
        #: Pings in a row nobody answered.
        self.missed = 0
        #: Times this watch took the lease from a silent holder.
        self.steals = 0
        self._unsubscribe = channel.subscribe(Router("pyjobq lease watch", {
            "lease_pong": self._heard, "lease_stolen": self._heard}, quiet=True))

    @property
    def watching(self) -> bool:
        return self._timer is not None

    def waiting(self) -> None:
        """In line now: ping at once and every ``PING_MS`` until :meth:`holding`."""
        if self._timer is None:
            self.missed, self._answered = 0, True
            self._ping()

    def holding(self) -> None:
        """Holding the lease (or no longer in line): no more pings."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _ping(self) -> None:
        self._timer = None
        if not self._answered:
            self.missed += 1
        if self.missed >= SILENT_PINGS:
            self.steals += 1
            self._channel.post(make("lease_stolen", source=self._source))
            self._steal()
            return
        self._answered = False
        self._channel.post(make("lease_ping", source=self._source))
        self._timer = _ARMING
        # Armed from a later turn: the holder must have had a turn to answer before the next
        # ping counts this one missed, however far the clock jumps (a simulated minute).
        asyncio.get_event_loop().call_soon(self._arm)

    def _arm(self) -> None:
        if self._timer is _ARMING:
            self._timer = self._clock.call_later(PING_MS, self._ping)

    def _heard(self, _msg: dict[str, Any]) -> None:
        # A pong from the holder, or another tab taking over (whose silence counts from now).
        self._answered, self.missed = True, 0

    def close(self) -> None:
        self.holding()
        self._unsubscribe()


def answer_pings(channel: Channel, source: str, holding: Callable[[], bool]) -> Unsubscribe:
    """Answer every ``lease_ping`` with a ``lease_pong`` while ``holding()``: called on the thread
    that holds the lock, which a frozen page or worker cannot run."""
    def ping(_msg: dict[str, Any]) -> None:
        if holding():
            channel.post(make("lease_pong", source=source))

    return channel.subscribe(Router("pyjobq lease", {"lease_ping": ping}, quiet=True))


class _Pass:
    """The pass holding a lease that is revoked from outside (:class:`HostLease`,
    :class:`GateLease`): its callback runs under :meth:`run`, and :meth:`revoke` ends it."""

    __slots__ = ("_revoke",)

    def __init__(self) -> None:
        self._revoke: Callable[[], None] | None = None

    async def run(self, callback: Callable[[], Awaitable[None]],
                  on_revoked: Callable[[], None]) -> bool:
        """Run ``callback()`` as the pass; False when it was revoked meanwhile (``on_revoked()``
        was called then, once)."""
        revoked = False

        def revoke() -> None:
            nonlocal revoked
            revoked = True
            on_revoked()

        self._revoke = revoke
        try:
            await callback()
        finally:
            if self._revoke is revoke:
                self._revoke = None
        return not revoked

    def revoke(self) -> None:
        """Revoke the pass running now, if any."""
        revoke, self._revoke = self._revoke, None
        if revoke is not None:
            revoke()


class LockLease:
    """The scheduler holds the lock itself (an executor side with no document)."""

    can_be_granted = True

    def __init__(self, locks: LockManager, name: str) -> None:
        self._locks = locks
        self._name = name

    async def hold(self, callback: Callable[[], Awaitable[None]],
                   on_revoked: Callable[[], None]) -> bool:
        async def run(_lock: Any) -> None:
            await callback()

        await self._locks.request(self._name, run)
        return True


class _InLine:
    """How :class:`HostLease` and :class:`LeaseHolder` ask ``grab`` for the lock: one request
    queued at a time, made in place of any still queued."""

    _grab: Grab
    _name: str
    #: Set while a request is queued: drops it.
    _cancel: Callable[[], None] | None

    def stolen(self) -> None:
        """The lock was taken from this holder while it held it."""
        raise NotImplementedError

    def _drop_request(self) -> None:
        """Drop the request queued, if any."""
        if self._cancel is not None:
            cancel, self._cancel = self._cancel, None
            cancel()

    def _ask(self, granted: Callable[[Callable[[], None]], None], *, steal: bool) -> None:
        """Queue a request for the lock, dropping one still queued: ``granted(release)`` once it
        is held (no request is queued then), :meth:`stolen` if it is taken while held."""
        self._drop_request()

        def on_granted(release: Callable[[], None]) -> None:
            self._cancel = None
            granted(release)

        self._cancel = self._grab(self._name, on_granted, steal=steal, on_stolen=self.stolen)


class HostLease(_InLine):
    """A worker host's lease (a notebook kernel, a PyScript worker): its bootstrap (worker.mjs)
    took the lock before loading Pyodide and holds it while the worker lives, so every drain
    runs at once — unless a tab in line found this worker silent (frozen with its page) and
    took the lock (:class:`LeaseWatch`). Then :meth:`stolen` revokes the pass holding it, and
    this worker gets back in line through ``grab``, pinging the new holder as any tab in line
    does; while it holds the lock it answers pings.

    Args:
        held: the bootstrap holds the lock now (False: it was taken before this scheduler booted).
        release_bootstrap: lets the bootstrap's lock go (a scheduler stopped for good).
    """

    can_be_granted = True

    def __init__(self, grab: Grab, name: str, channel: Channel, clock: Clock, source: str, *,
                 held: bool, release_bootstrap: Callable[[], None] = lambda: None) -> None:
        self._grab = grab
        self._name = name
        self._holding = held
        self._release: Callable[[], None] | None = release_bootstrap if held else None
        self._cancel = None
        self._granted: asyncio.Future[None] | None = None
        self._pass = _Pass()
        self._closed = False
        self.watch = LeaseWatch(channel, clock, source, self.steal)
        self._unanswer = answer_pings(channel, source, lambda: self._holding)
        if not held:
            self._request()

    @property
    def holding(self) -> bool:
        return self._holding

    async def hold(self, callback: Callable[[], Awaitable[None]],
                   on_revoked: Callable[[], None]) -> bool:
        while not self._holding:
            if self._granted is None or self._granted.done():
                self._granted = asyncio.get_event_loop().create_future()
            await asyncio.shield(self._granted)
        return await self._pass.run(callback, on_revoked)

    def stolen(self) -> None:
        """The lock was taken from this worker (it was silent): stop claiming, get back in line."""
        if not self._holding:
            return
        self._holding, self._release = False, None
        self._pass.revoke()
        self._request()

    def steal(self) -> None:
        """Take the lock from its silent holder (this worker's watch, or its page's word)."""
        if not self._holding and not self._closed:
            self._request(steal=True)

    def _request(self, *, steal: bool = False) -> None:
        if self._closed or self._holding or (self._cancel is not None and not steal):
            return

        def granted(release: Callable[[], None]) -> None:
            if self._closed:
                release()
                return
            self._holding, self._release = True, release
            self.watch.holding()
            if self._granted is not None and not self._granted.done():
                self._granted.set_result(None)

        self._ask(granted, steal=steal)
        self.watch.waiting()

    def close(self) -> None:
        """Let the lock go and leave the line (the scheduler stopped for good)."""
        self._closed = True
        self.watch.close()
        self._unanswer()
        self._drop_request()
        release, self._release, self._holding = self._release, None, False
        if release is not None:
            release()


def watch_in_line(link: Link, channel: Channel, clock: Clock, source: str) -> Callable[[], None]:
    """A worker host's page while its worker's bootstrap waits in line for the lock (no Pyodide
    there to ping): watch the holder from here, and tell the bootstrap to take the lock
    (``lease_steal``) from a silent one. Stops when the worker says it holds the lock
    (``worker_booting``); returns what stops it sooner."""
    watch = LeaseWatch(channel, clock, source, lambda: link.send(make("lease_steal")))
    unsubscribe = link.subscribe(Router("pyjobq lease watch",
                                        {"worker_booting": lambda _msg: stop()}, quiet=True))

    def stop() -> None:
        watch.close()
        unsubscribe()

    watch.waiting()
    return stop


class NeverLease:
    """Never granted: a scheduler on this lease only answers requests (a page's own store
    requests while its worker waits for the lease, pyjobq/browser/page_main.py) and never
    claims, settles or recovers anything."""

    can_be_granted = False

    def __init__(self) -> None:
        self._closed: asyncio.Future[None] | None = None

    async def hold(self, callback: Callable[[], Awaitable[None]],
                   on_revoked: Callable[[], None]) -> bool:
        if self._closed is None:
            self._closed = asyncio.get_event_loop().create_future()
        await self._closed
        return True

    def close(self) -> None:
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)


class GateLease:
    """Granted while its owner has it open: the outbox's, open from ``start()`` to ``stop()``.

    The outbox takes no Web Lock (its claims are leases on the records, spec outbox.txt), so
    its engine's processor lease only says whether this outbox runs. Its scheduler listens
    from the first request on — an entry enqueued while the outbox is stopped is stored at
    once — and passes wait here until :meth:`open`; :meth:`close` revokes the pass holding
    it, which claims nothing more (a run already handed over finishes and is settled).
    """

    can_be_granted = True

    def __init__(self) -> None:
        self._open = False
        self._opened: asyncio.Future[None] | None = None
        self._pass = _Pass()

    def open(self) -> None:
        self._open = True
        opened, self._opened = self._opened, None
        if opened is not None and not opened.done():
            opened.set_result(None)

    def close(self) -> None:
        self._open = False
        self._pass.revoke()

    async def hold(self, callback: Callable[[], Awaitable[None]],
                   on_revoked: Callable[[], None]) -> bool:
        while not self._open:
            if self._opened is None:
                self._opened = asyncio.get_event_loop().create_future()
            await asyncio.shield(self._opened)
        return await self._pass.run(callback, on_revoked)


class LinkLease:
    """The worker's side of a page-held lease: ask the page, hold while it says so."""

    can_be_granted = True

    def __init__(self, link: Link) -> None:
        self._link = link
        self._granted: asyncio.Future[int] | None = None
        self._epoch: int | None = None  # the grant being held
        self._on_revoked: Callable[[], None] | None = None
        self._unsolicited: int | None = None  # granted before this worker asked (its boot)
        # Beside the scheduler on its link (which logs what is not one of ours).
        self._unsubscribe = link.subscribe(Router("pyjobq lease", {
            "lease_granted": self._granted_now, "lease_revoked": self._revoked}, quiet=True))

    async def hold(self, callback: Callable[[], Awaitable[None]],
                   on_revoked: Callable[[], None]) -> bool:
        self._granted = asyncio.get_event_loop().create_future()
        if self._unsolicited is not None:
            self._epoch = self._unsolicited
            self._granted.set_result(self._unsolicited)
            self._unsolicited = None
        else:
            self._link.send(make("lease_request"))
        epoch = await self._granted
        if self._epoch != epoch:
            # Revoked in the same turn it was granted, before this drain began (a page that
            # lent it and froze, or lost it to a steal): a drain under it would claim runs the
            # page refuses, round and round. Hand it back unused.
            self._granted = None
            self._link.send(make("lease_released", epoch=epoch))
            return False
        self._on_revoked = on_revoked
        revoked = False
        try:
            await callback()
        finally:
            revoked = self._epoch is None
            self._epoch, self._on_revoked, self._granted = None, None, None
            # Sent after every run the callback handed off: the page stops refusing runs here.
            self._link.send(make("lease_released", epoch=epoch))
        return not revoked

    def _granted_now(self, msg: dict[str, Any]) -> None:
        if self._granted is not None and not self._granted.done():
            self._epoch = msg["epoch"]  # held from now: a revocation that follows at once counts
            self._granted.set_result(msg["epoch"])
        elif self._epoch is None and self._unsolicited is None:
            # The page took the lease before this worker's scheduler asked (it boots this
            # worker only once it holds it): the first drain uses it.
            self._unsolicited = msg["epoch"]
        else:  # a second grant nobody waits for (cannot happen on a FIFO link): hand it back
            self._link.send(make("lease_released", epoch=msg["epoch"]))

    def _revoked(self, msg: dict[str, Any]) -> None:
        if msg["epoch"] == self._unsolicited:
            self._unsolicited = None
            self._link.send(make("lease_released", epoch=msg["epoch"]))
        elif msg["epoch"] == self._epoch:
            self._epoch = None
            on_revoked, self._on_revoked = self._on_revoked, None
            if on_revoked is not None:
                on_revoked()

    def close(self) -> None:
        self._unsubscribe()


class ServiceWorkerLease:
    """The lease as the Service Worker holds it: taken before the scheduler starts
    (``if_available``), revoked when a page asks for it, when the budget ends or when the drain
    is done. Once revoked it is never held again by this drain. ``stolen``: a page took the
    lock from it (the drain's runs may still be finishing, but it holds nothing)."""

    can_be_granted = True

    def __init__(self) -> None:
        self.revoked = False
        self.stolen = False
        self._on_revoked: Callable[[], None] | None = None
        #: Resolved when the drain is over: a scheduler loop waiting on a revoked lease returns.
        self._over: asyncio.Future[None] = asyncio.get_event_loop().create_future()

    async def hold(self, callback: Callable[[], Awaitable[None]],
                   on_revoked: Callable[[], None]) -> bool:
        # Kept after the pass: a revocation between passes reaches the engine too, or a run's
        # settle would still chain its lane's next claim.
        self._on_revoked = on_revoked
        if self.revoked:
            on_revoked()  # a new pass begins unrevoked: the settles must see it revoked again
            await asyncio.shield(self._over)  # the drain stops this scheduler, then ends this
            return False
        await callback()
        return not self.revoked

    def end(self) -> None:
        """The drain is over (its scheduler stopped): a loop waiting for the lease returns,
        rather than stay pending until the collector destroys it with an error."""
        self.revoke()
        if not self._over.done():
            self._over.set_result(None)

    def revoke(self) -> None:
        if not self.revoked:
            self.revoked = True
            if self._on_revoked is not None:
                self._on_revoked()


class LeaseHolder(_InLine):
    """The page's side of a page-held lease: hold the lock for the worker, let go when frozen.

    ``freeze()`` is for the ``freeze`` and ``pagehide`` events, ``resume()`` for
    ``resume`` and ``pageshow``; both are idempotent.
    """

    def __init__(self, link: Link, grab: Grab, name: str, *,
                 on_first_grant: Callable[[], None] | None = None,
                 eager: bool = False, channel: Channel | None = None, clock: Clock | None = None,
                 source: str = "") -> None:
        """``eager``: take the lock now, before the worker asks (a tab that opens the queue is
        in line for it), and call ``on_first_grant`` the first time it is held — the page
        boots its worker's Pyodide then, so a waiting tab loads none. ``channel`` (the lease
        channel) and ``clock``: answer pings while holding, and watch the holder while in line
        (:class:`LeaseWatch`)."""
        self.watch: LeaseWatch | None = None
        self._unanswer: Unsubscribe | None = None
        if channel is not None and clock is not None:
            self.watch = LeaseWatch(channel, clock, source, self.steal)
            self._unanswer = answer_pings(channel, source, lambda: self.holding)
        self._link = link
        self._grab = grab
        self._name = name
        self._epoch = 0
        self._lent: int | None = None  # the epoch the worker holds now; None: between drains
        self._release: Callable[[], None] | None = None  # set while the lock is held
        self._cancel = None  # set while a request is queued
        self._wanted = eager
        self._on_first_grant = on_first_grant
        self._refusing = 0  # the last revoked epoch the worker has not acknowledged; 0: none
        self.frozen = False
        # Beside the page's engine client on its link (which logs what is not one of ours).
        self._unsubscribe = link.subscribe(Router("pyjobq lease", {
            "lease_request": self._asked, "lease_released": self._released}, quiet=True))
        if eager:
            self._request()

    @property
    def holding(self) -> bool:
        return self._release is not None

    @property
    def lent(self) -> bool:
        """True while the worker drains under a grant
        (between ``lease_granted`` and its release)."""
        return self._lent is not None

    @property
    def refusing(self) -> bool:
        """True between a revocation and the worker's acknowledgement: ``run`` is refused then."""
        return self._refusing != 0

    def _asked(self, _msg: dict[str, Any]) -> None:
        self._wanted = True
        if self._release is not None and self._lent is None:
            self._lend()  # held between drains: lend it again at once
        else:
            self._request()

    def _released(self, msg: dict[str, Any]) -> None:
        epoch = msg["epoch"]
        if epoch == self._lent:
            self._lent = None  # kept: this tab holds the lease for its life (see above)
        if self._refusing and epoch >= self._refusing:
            self._refusing = 0

    def _lend(self) -> None:
        self._wanted = False
        self._epoch += 1
        self._lent = self._epoch
        self._link.send(make("lease_granted", epoch=self._epoch))

    def _request(self, *, steal: bool = False) -> None:
        if self.frozen or not self._wanted or self._release is not None \
                or (self._cancel is not None and not steal):
            return

        def granted(release: Callable[[], None]) -> None:
            if self.frozen:  # granted as the page froze: not ours to keep
                release()
                self._request()
                return
            self._release = release
            if self.watch is not None:
                self.watch.holding()
            first, self._on_first_grant = self._on_first_grant, None
            if first is not None:
                first()
            self._lend()

        self._ask(granted, steal=steal)
        if self.watch is not None:
            self.watch.waiting()

    def steal(self) -> None:
        """Take the lock from its silent holder (:class:`LeaseWatch`), if this page is in line."""
        if self._cancel is not None:
            self._request(steal=True)

    def stolen(self) -> None:
        """The lock was taken from this page (it was silent, busy perhaps): revoke the worker's
        grant as a freeze does, and get back in line."""
        if self._release is None:
            return
        self._release = None
        lent, self._lent = self._lent, None
        if lent is not None:
            self._refusing = lent
            self._link.send(make("lease_revoked", epoch=lent))
        self._wanted = True
        self._request()

    def _let_go(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def freeze(self) -> None:
        """``freeze`` / ``pagehide``: release the lock now, before the page
        (and its worker) stop."""
        if self.frozen:
            return
        self.frozen = True
        if self.watch is not None:
            self.watch.holding()  # not in line while frozen: resume() asks again
        # A queued request granted while frozen would hold the lock for a page that cannot run.
        self._drop_request()
        if self._release is not None:
            self._let_go()
            lent, self._lent = self._lent, None
            if lent is not None:
                self._refusing = lent
                self._link.send(make("lease_revoked", epoch=lent))
                # The worker acknowledges and asks again; the request waits for resume().
            # Taken back on resume whether or not the worker is draining: a tab that has the
            # queue is in line for it.
            self._wanted = True

    def resume(self) -> None:
        """``resume`` / ``pageshow``: take the lease back if the worker wants it."""
        if not self.frozen:
            return
        self.frozen = False
        self._request()

    def close(self) -> None:
        self._unsubscribe()
        if self.watch is not None:
            self.watch.close()
        if self._unanswer is not None:
            self._unanswer()
        if self._cancel is not None:
            self._cancel()
            self._cancel = None
        self._let_go()
