"""A simulated tab's worker boots as ``worker.mjs`` does, followed by the browser's own
:class:`~pyjobq.executor.boot.Boot` (pyjobq/testing/_boot.py), and fails or stalls as the browser's
can. Whatever its boot does, a tab that cannot process never holds the lease, the others take
over, and its jobs reach their end once it can.
"""

from __future__ import annotations

from typing import Any

import pytest

from helpers import Server
from pyjobq import WorkerUnavailable
from pyjobq.testing import LOCK, BootFault, Tab, World, run, settle

STALL_MS = 60_000.0


def online_only(world: World, server: Server) -> Any:
    """``server``, behind a network that may be down (``world.online``)."""
    async def transport(method: str, path: str, body: Any) -> Any:
        if not world.online:
            raise TypeError("Failed to fetch")
        return await server(method, path, body)

    return transport


@pytest.fixture(params=[False, True], ids=["page", "worker_host"])
def host(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The options of a tab's page that waits in line for the lease and holds it in the page,
    then of a worker host (an executor side with no document): a test taking it runs with
    each."""
    return {"worker_host": True} if request.param else {"page_lease": True, "waiting": True}


def failure_stage(tab: Tab) -> str | None:
    assert tab.boot is not None
    return tab.boot.retrying.stage if tab.boot.retrying is not None else None


def test_a_waiting_tab_boots_only_once_it_holds_the_lease() -> None:
    async def main() -> None:
        world, server = World(), Server()
        first = world.open_tab(transport=server, page_lease=True, waiting=True)
        await settle()
        second = world.open_tab(transport=server, page_lease=True, waiting=True)
        await settle()
        assert (first.booted, first.holds_lease) == (True, True)
        # in line, files fetched, no Pyodide
        assert (second.booted, second.holds_lease) == (False, False)
        job = second.side.enqueue_fetch("POST", "/from-the-second")
        assert (await job.done).status == "done" and server.paths == ["/from-the-second"]
        first.crash()
        await settle()
        assert (second.booted, second.holds_lease) == (True, True)
        assert [t.workers_started for t in (first, second)] == [1, 1]
    run(main)


def test_a_tab_that_takes_over_offline_boots_from_the_files_it_fetched_and_sends_when_back_online() -> None:  # noqa: E501
    # The offline takeover, simulated: B fetched its files while waiting; the network drops, B
    # files a job and A closes. B boots offline, and sends the moment the network is back.
    async def main() -> None:
        world, server = World(), Server()
        a = world.open_tab(transport=online_only(world, server), page_lease=True, waiting=True)
        await settle()
        b = world.open_tab(transport=online_only(world, server), page_lease=True, waiting=True)
        await settle()
        world.online = False
        job = b.side.enqueue_fetch("POST", "/filed-offline")
        await settle()
        a.crash()
        await settle()
        assert (b.booted, b.holds_lease, b.boot_log) == (True, True, [])
        assert server.paths == [] and (await world.store.get(job.id)).code == "offline"
        world.online = True
        b.online()
        assert (await job.done).status == "done" and server.paths == ["/filed-offline"]
    run(main)


def test_a_tab_opened_offline_holds_no_lease_and_boots_on_the_online_event(
        host: dict[str, Any]) -> None:
    async def main() -> None:
        world, server = World(), Server()
        world.online = False
        tab = world.open_tab(transport=online_only(world, server), **host)
        job = tab.side.enqueue_fetch("POST", "/opened-offline")
        await settle()
        assert failure_stage(tab) == "fetch" and not tab.holds_lease and not tab.booted
        assert world.locks.held().get(LOCK) is None
        assert (await job.stored) is None and not job.done.done()  # stored, pending: not failed
        assert tab.side.unavailable is None
        for _ in range(10):
            await world.advance(1_000.0)                   # the ladder tries again, still offline
        assert tab.workers_started > 2 and not tab.holds_lease

        world.online = True
        tab.online()                                       # a new worker at once, no ladder wait
        assert (await job.done).status == "done" and server.paths == ["/opened-offline"]
        assert tab.booted and tab.holds_lease and tab.boot is not None and tab.boot.failures == 0
    run(main)


@pytest.mark.parametrize("fault", [BootFault("fetch"), BootFault("fetch", stall=True)], ids=str)
def test_a_download_that_fails_or_stalls_a_given_number_of_times_is_retried_until_it_boots(
        fault: BootFault) -> None:
    async def main() -> None:
        world, server = World(), Server()
        tab = world.open_tab(transport=server, page_lease=True, waiting=True,
                             boot_faults=[fault] * 3)
        job = tab.side.enqueue_fetch("POST", "/after-three-faults")
        await settle()
        assert not tab.booted and not tab.holds_lease
        for _ in range(8):
            # a stall is ended at the deadline; then the ladder
            await world.advance(STALL_MS)
        assert (await job.done).status == "done" and server.paths == ["/after-three-faults"]
        assert tab.workers_started == 4 and tab.boot_faults == []
        assert len([line for line in tab.boot_log if "console.warn" in line]) == 1  # warned once
    run(main)


def test_a_boot_that_stalls_holding_the_lease_lets_it_go_at_the_deadline_and_another_tab_takes_over(
        host: dict[str, Any]) -> None:
    # The stalled boot, simulated: a refused pyodide.asm.wasm leaves loadPyodide hanging.
    async def main() -> None:
        world, server = World(), Server()
        stalled = world.open_tab(transport=server, boot_faults=[BootFault("load", stall=True)],
                                 **host)
        await settle()
        other = world.open_tab(transport=server, page_lease=True, waiting=True)
        job = other.side.enqueue_fetch("POST", "/while-the-first-stalls")
        await settle()
        assert stalled.holds_lease and not stalled.booted and not other.holds_lease
        await world.advance(STALL_MS - 1)
        assert stalled.holds_lease and server.paths == []  # within its deadline: a slow boot
        await world.advance(1)
        assert failure_stage(stalled) == "timeout" and not stalled.holds_lease
        assert other.holds_lease and other.booted
        assert (await job.done).status == "done" and server.paths == ["/while-the-first-stalls"]
        await world.advance(STALL_MS)                      # its retry fetches and gets in line
        assert stalled.workers_started == 2
        assert stalled.boot is not None and stalled.boot.retrying is None
        assert not stalled.holds_lease and not stalled.booted
    run(main)


def test_a_stalled_download_that_finishes_after_its_worker_was_ended_puts_nothing_in_line() -> None:
    async def main() -> None:
        world, server = World(), Server()
        tab = world.open_tab(transport=server, page_lease=True, waiting=True,
                             boot_faults=[BootFault("fetch", stall=True, for_ms=STALL_MS + 500)])
        await settle()
        await world.advance(STALL_MS)
        assert failure_stage(tab) == "timeout"
        # the old download ends; its worker is gone
        await world.advance(600)
        assert not tab.holds_lease and tab.workers_started == 1
        await world.advance(1_000)                         # the ladder's first step: a new worker
        assert tab.workers_started == 2 and tab.booted and tab.holds_lease
    run(main)


def test_a_load_that_fails_online_is_permanent_and_lets_the_lease_go() -> None:
    async def main() -> None:
        world, server = World(), Server()
        tab = world.open_tab(transport=server, page_lease=True, waiting=True,
                             boot_faults=[BootFault("load")])
        job = tab.side.enqueue_fetch("POST", "/never-here")
        await settle()
        assert not tab.holds_lease and tab.workers_started == 1
        with pytest.raises(WorkerUnavailable) as raised:
            await job.done
        assert raised.value.stage == "load"
        other = world.open_tab(transport=server, page_lease=True, waiting=True)
        await settle()
        assert other.holds_lease and (await world.store.get(job.id)).status.value == "done"
        assert server.paths == ["/never-here"]
    run(main)


def test_a_boot_fault_needs_a_worker_that_boots_in_steps() -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match="waiting=True or worker_host=True"):
            World().open_tab(page_lease=True, boot_faults=[BootFault()])
        with pytest.raises(ValueError, match="stall=True"):
            BootFault("fetch", for_ms=10.0)
    run(main)


def test_a_tab_frozen_while_its_worker_boots_takes_no_step_until_it_thaws() -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab(transport=Server(), page_lease=True, waiting=True)
        tab.freeze()
        await settle()
        assert not tab.holds_lease and not tab.booted
        await world.advance(2 * STALL_MS)                  # frozen: no deadline, no step
        assert tab.boot is not None and tab.boot.retrying is None and tab.workers_started == 1
        tab.resume()
        await settle()
        assert tab.booted and tab.holds_lease and tab.workers_started == 1
    run(main)
