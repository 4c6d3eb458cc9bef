"""Simulated tabs whose page side is wired like the browser's: the world's clock and its own locks.

:class:`tabs.Tab` builds an ``ExecutorSide`` with neither a clock nor a lock client, so
its volatile engine would run on the wall clock and it could never hold a yield lock.
A :class:`FullTab` gives the page side the world's :class:`~pyjobq.memory.FakeClock`,
its own ``hub.client()`` (a page and its worker are two lock contexts, as in Chromium)
and the same ``yields`` map as its scheduler.
"""

from __future__ import annotations

from typing import Any

from pyjobq.executor import ExecutorSide
from pyjobq.memory import link_pair
from pyjobq.scheduler import Scheduler
from tabs import CHANNEL, LOCK, GuardedStore, Tab, World


class FullTab(Tab):
    def __init__(self, world: World, name: str, *, transport: Any = None, reconstructors: dict | None = None,
                 handshake_timeout_ms: float = 10_000.0, yields: dict | None = None) -> None:
        self.world, self.name, self.alive = world, name, True
        self.page_link, self.worker_link = link_pair()
        self.locks = world.locks.client()  # the worker's context
        self.page_locks = world.locks.client()  # the page's context
        self.side = ExecutorSide(link=self.page_link, channel=world.channels.channel(CHANNEL), source=name,
                                 reconstructors=reconstructors, transport=transport, clock=world.clock,
                                 locks=self.page_locks, yields=yields)
        self.scheduler = Scheduler(
            store=GuardedStore(world.store, self), locks=self.locks, channel=world.channels.channel(CHANNEL),
            link=self.worker_link, clock=world.clock, lock_name=LOCK, source=name, yields=yields,
            handshake_timeout_ms=handshake_timeout_ms, random=world.random, is_online=lambda: world.online,
        )
        self.scheduler.start()
        #: Every job's fields as last published to this page (a done volatile job is forgotten
        #: by its engine once published: this is where its last state is read).
        self.published: dict[str, dict[str, Any]] = {}
        self.side.on_update(self._heard)

    def _heard(self, update: Any) -> None:
        if not update.get("progress_only"):
            self.published[update["id"]] = {**self.published.get(update["id"], {}), **dict(update)}

    def crash(self) -> None:
        super().crash()
        self.page_locks.crash()


def open_full_tab(world: World, **kw: Any) -> FullTab:
    tab = FullTab(world, f"tab{next(world._names)}", **kw)
    world.tabs.append(tab)
    return tab
