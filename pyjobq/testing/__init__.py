"""pyjobq's test kit: test code that enqueues jobs on plain CPython, with no browser.

Everything here runs on CPython (no Pyodide, no ``js``) and nothing in it sleeps or reads the
wall clock:

- :func:`run` — run an ``async def`` test with one set of guarantees (a timeout guard,
  unretrieved task exceptions fail the test, the loop closed); :func:`settle` — let the
  simulated world go quiet.
- :class:`World` and :class:`Tab` — one origin with several tabs sharing a store, locks, a
  channel and a fake clock, each tab a page and its scheduler worker, as in a browser. A
  tab can :meth:`~Tab.crash`, :meth:`~Tab.freeze` and :meth:`~Tab.resume`, and its page can be
  busy (:meth:`~Tab.block` / :meth:`~Tab.unblock`) while its worker runs on; the world can go
  offline (``world.online = False``) and move time (:meth:`World.advance`).
- :class:`ServiceWorker` — pyjobq's Service Worker, a tab without a page
  (:meth:`World.start_service_worker`: a ``sync`` event): it runs the browser's drain on the
  world's store, locks and channel, and the browser may :meth:`~ServiceWorker.kill` it.
- :class:`FakeClock` — the clock that moves only when told to.
- :func:`record` — a stored job record with the fields you name; :func:`sequential_ids` —
  predictable job ids.
- :class:`Response` — what a test transport returns for a fetch job.
- Fault injection for harder tests: :class:`GuardedStore` and :attr:`World.store_hook` (act
  in the middle of a tab's store write), :attr:`World.link_hook` (act as a worker posts to its
  page, e.g. at ``run``), :class:`FreezableClock`, :class:`FreezableChannel`;
  :class:`BootFault` (a worker's boot that fails or stalls: ``open_tab(boot_faults=...)``).

A test of your app's code::

    from pyjobq.testing import Response, World, run

    def test_saving_a_note_posts_it_once() -> None:
        async def main() -> None:
            world = World()
            calls = []

            async def server(method, path, body):
                calls.append((method, path, body))
                return Response(201, {"id": 7})

            tab = world.open_tab(transport=server)
            job = save_note(tab.queue, "hello")        # your code, given the queue
            assert (await job.done).status == "done"
            assert calls == [("POST", "/notes", {"text": "hello"})]
        run(main)

docs/testing.md walks through it, with cross-tab tests of real pages in Chromium beside it:
``playwright.cjs`` (:data:`PLAYWRIGHT_HELPER`) for Playwright Test, and
:mod:`pyjobq.testing.playwright` with pyjobq's pytest plugin (the ``pyjobq_site`` fixture) for
pytest; those need Playwright, and are not imported from here.
"""

from __future__ import annotations

from pathlib import Path

from . import _records, _world
from ._boot import BootFault
from ._clock import FakeClock
from ._records import record, sequential_ids
from ._response import Response
from ._run import UnretrievedError, run, settle
from ._world import FreezableChannel, FreezableClock, GuardedStore, ServiceWorker, Tab, World

T0 = _records.T0
"""The time :func:`record` stamps by default and :class:`FakeClock` starts at
(ms since the epoch)."""
LOCK = _world.LOCK
"""The lock that elects the processing tab in a :class:`World`: pyjobq's default ``lock_name``."""
CHANNEL = _world.CHANNEL
"""The channel a :class:`World`'s tabs share: pyjobq's default ``channel_name``."""
StoreHook = _world.StoreHook
"""The type of :attr:`World.store_hook`:
``async (tab or service worker, operation, "before" | "after", args) -> None``."""
LinkHook = _world.LinkHook
"""The type of :attr:`World.link_hook`: ``(tab, message) -> None``,
as a tab's worker posts to its page."""
PLAYWRIGHT_HELPER = str(Path(__file__).with_name("playwright.cjs"))
"""The path of the Playwright helper for cross-tab tests of your pages (docs/testing.md):
``require()`` or ``import`` it from your Playwright tests."""

__all__ = [
    "run", "settle", "UnretrievedError",
    "World", "Tab", "ServiceWorker", "FakeClock",
    "record", "sequential_ids", "T0",
    "Response",
    "GuardedStore", "FreezableClock", "FreezableChannel", "StoreHook", "LinkHook",
    "LOCK", "CHANNEL",
    "BootFault",
    "PLAYWRIGHT_HELPER",
]
