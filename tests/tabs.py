"""Simulated tabs for CPython: several ExecutorSide + Scheduler pairs on shared fakes.

A :class:`World` is one browser origin: one MemoryStore, one LockHub, one
ChannelHub and one FakeClock. Each :class:`Tab` is a page (ExecutorSide) and
its scheduler worker, wired by ``link_pair()``, with its own ``hub.client()``
of the lock manager. Nothing here reads the wall clock or sleeps for real;
``settle()`` runs the event loop until no callback is ready.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Callable

from pyjobq import executor as _executor
from pyjobq.core.ports import LockStolen  # noqa: F401  (re-exported for tests)
from pyjobq.executor import ExecutorSide
from pyjobq.memory import ChannelHub, FakeClock, LockHub, MemoryStore, link_pair
from pyjobq.scheduler import Scheduler

LOCK = "ui-job-processor"
CHANNEL = "ui-jobs"


async def settle(limit: int = 500) -> None:
    """Run the loop until nothing is ready (the fakes use no loop timers, so that is quiescence)."""
    loop = asyncio.get_running_loop()
    for _ in range(limit):
        await asyncio.sleep(0)
        if not loop._ready:  # type: ignore[attr-defined]  # CPython detail; the test-only shortcut
            return


class DeterministicIds:
    """Replace uuid4 ids with a counter while active, so a seed replays exactly."""

    def __init__(self, *, descending: bool = False) -> None:
        self._saved: Any = None
        self._step = -1 if descending else 1

    def __enter__(self) -> "DeterministicIds":
        counter = itertools.count(50_000, self._step)
        self._saved = _executor.new_id
        _executor.new_id = lambda: f"id{next(counter):05d}"
        return self

    def __exit__(self, *exc: object) -> None:
        _executor.new_id = self._saved


class GuardedStore:
    """One tab's view of the shared store: a write after the tab died is recorded as a violation."""

    WRITES = ("add", "update", "put_many", "delete_many")

    def __init__(self, store: MemoryStore, tab: "Tab") -> None:
        self._store, self._tab = store, tab

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in self.WRITES:
            return attr

        async def guarded(*args: Any, **kw: Any) -> Any:
            if not self._tab.alive:
                self._tab.world.violations.append(f"dead tab {self._tab.name} wrote to the store ({name})")
            return await attr(*args, **kw)

        return guarded


class Tab:
    def __init__(self, world: "World", name: str, *, transport: Any, reconstructors: dict | None,
                 handshake_timeout_ms: float, yields: dict | None) -> None:
        self.world, self.name, self.alive = world, name, True
        self.page_link, self.worker_link = link_pair()
        self.locks = world.locks.client()
        self.side = ExecutorSide(link=self.page_link, channel=world.channels.channel(CHANNEL), source=name,
                                 reconstructors=reconstructors, transport=transport)
        self.scheduler = Scheduler(
            store=GuardedStore(world.store, self), locks=self.locks, channel=world.channels.channel(CHANNEL),
            link=self.worker_link, clock=world.clock, lock_name=LOCK, source=name, yields=yields,
            handshake_timeout_ms=handshake_timeout_ms, random=world.random, is_online=lambda: world.online,
        )
        self.scheduler.start()

    def crash(self) -> None:
        """The tab is gone: its worker stops, its tasks die, its locks are released, its ports close."""
        self.alive = False
        sched, side = self.scheduler, self.side
        sched.stop()
        for job_id in sorted(side._running):
            side._abandon(job_id)
        tasks = list(sched._tasks)
        if sched._pass_task is not None:
            tasks.append(sched._pass_task)
        for task in sorted(tasks, key=_creation_order):
            task.cancel()
        self.locks.crash()
        self.page_link.close()
        self.worker_link.close()
        side.stop()
        sched._channel.close()


def _creation_order(task: asyncio.Future[Any]) -> int:
    name = task.get_name() if isinstance(task, asyncio.Task) else ""
    return int(name.rsplit("-", 1)[-1]) if name.rsplit("-", 1)[-1].isdigit() else 0


class World:
    def __init__(self, random: Callable[[], float] = lambda: 0.0) -> None:
        self.store = MemoryStore()
        self.locks = LockHub()
        self.channels = ChannelHub()
        self.clock = FakeClock()
        self.random = random
        self.online = True
        self.tabs: list[Tab] = []
        self.violations: list[str] = []
        self._names = itertools.count(1)

    def open_tab(self, *, transport: Any = None, reconstructors: dict | None = None,
                 handshake_timeout_ms: float = 10_000.0, yields: dict | None = None) -> Tab:
        tab = Tab(self, f"tab{next(self._names)}", transport=transport, reconstructors=reconstructors,
                  handshake_timeout_ms=handshake_timeout_ms, yields=yields)
        self.tabs.append(tab)
        return tab

    @property
    def live(self) -> list[Tab]:
        return [t for t in self.tabs if t.alive]

    async def advance(self, ms: float) -> None:
        """Move the clock, firing timers, and let everything they start run."""
        self.clock.advance(ms)
        await settle()
