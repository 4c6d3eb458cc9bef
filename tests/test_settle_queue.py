"""Settles that arrive while settle transactions are under way go together in the next one
(pyjobq/engine/settle.py, ``Settler._queued``): each is still decided on its own record, as
alone, and none waits for ever, whatever is cancelled."""

from __future__ import annotations

import asyncio
from typing import Any

from helpers import Server
from pyjobq.core.errors import StorageError
from pyjobq.engine import settle as settle_module
from pyjobq.engine.settle import RETRY_MS
from pyjobq.testing import Response, World, run, settle
from pyjobq.testing._world import Tab

LANES = ("a", "b", "c", "d")


def _first_commits_held(world: World) -> tuple[list[list[str]], list[asyncio.Future[None]]]:
    """From now on the world's first IN_FLIGHT settle transactions wait, each until its gate
    opens. Returns every update_many's job ids (in order) and the gates."""
    assert settle_module.IN_FLIGHT == 2
    gates: list[asyncio.Future[None]] = [asyncio.get_running_loop().create_future()
                                         for _ in range(settle_module.IN_FLIGHT)]
    writes: list[list[str]] = []

    async def slow(_tab: Tab, operation: str, phase: str, args: tuple[Any, ...]) -> None:
        if operation == "update_many" and phase == "before":
            writes.append([change.job_id for change in args[0]])
            if len(writes) <= len(gates):
                await gates[len(writes) - 1]

    world.store_hook = slow
    return writes, gates


async def _four_lanes_two_commits_held() -> tuple[World, Server, Tab, list[Any],
                                                  list[list[str]], list[asyncio.Future[None]]]:
    """Four lanes' jobs on the wire; a's and b's settles then commit slowly (each held until
    its gate opens), so c's and d's arrive while IN_FLIGHT transactions are under way.
    Returns every update_many's job ids, in order, from the first settle on."""
    world, server = World(), Server(*["hold"] * len(LANES))
    tab = world.open_tab(transport=server)
    jobs = [tab.side.enqueue_fetch("POST", f"/{lane}", type=lane) for lane in LANES]
    await settle()
    assert server.holding == [f"/{lane}" for lane in LANES]
    writes, gates = _first_commits_held(world)
    server.release("/a", Response(200, {"lane": "a"}))
    server.release("/b", Response(200, {"lane": "b"}))
    await settle()
    assert writes == [[jobs[0].id], [jobs[1].id]]
    return world, server, tab, jobs, writes, gates


def test_settles_queued_behind_the_commits_under_way_go_in_one_transaction() -> None:
    async def main() -> None:
        world, server, _tab, jobs, writes, gates = await _four_lanes_two_commits_held()
        server.release("/c", Response(500, {"lane": "c"}))
        server.release("/d", Response(422, {"lane": "d"}))
        await settle()
        assert len(writes) == 2  # c's and d's settles wait for a transaction to end
        gates[0].set_result(None)  # a's ends: the first waiting commits the queue
        await settle()
        assert writes[2:] == [[jobs[2].id, jobs[3].id]]  # together, in the order they came
        gates[1].set_result(None)
        await settle()
        a, b, c, d = [await world.store.get(job.id) for job in jobs]
        assert (a.status, a.result, b.status, b.result) == ("done", {"lane": "a"},
                                                            "done", {"lane": "b"})
        assert (c.status, c.attempts, c.http_status) == ("pending", 1, 500)  # retried later
        assert (d.status, d.http_status) == ("failed", 422)  # failed at once, as alone
        assert (await jobs[0].done).result == {"lane": "a"}
        assert (await jobs[3].done).http_status == 422
    run(main)


def test_a_transaction_of_queued_settles_that_fails_commits_each_alone() -> None:
    async def main() -> None:
        world, server, _tab, jobs, writes, gates = await _four_lanes_two_commits_held()
        server.release("/c", Response(200, {"n": "c"}))
        server.release("/d", Response(200, {"n": 3}))
        await settle()
        held = world.store_hook
        assert held is not None
        refused: list[list[str]] = []

        async def refuse_c(tab_: Tab, operation: str, phase: str, args: tuple[Any, ...]) -> None:
            await held(tab_, operation, phase, args)
            ids = [change.job_id for change in args[0]] if operation == "update_many" else []
            # The store refuses c's success together with d, then alone, and again at each of
            # the settle's tries (settle.RETRY_MS); its failure it takes.
            if phase == "before" and jobs[2].id in ids and len(refused) < 2 + len(RETRY_MS):
                refused.append(ids)
                raise StorageError("IndexedDB update_many failed: DataError")

        world.store_hook = refuse_c
        gates[0].set_result(None)  # a's ends: c takes the turn, and d along
        await settle()
        gates[1].set_result(None)
        await settle()
        # d alone is stored at once: c's tries do not hold it back.
        assert (await world.store.get(jobs[3].id)).status == "done"
        for wait in RETRY_MS:
            await world.advance(wait)
        # The two together, refused whole; then each alone, as if they had never met: c's
        # success refused again at every try and failed clearly, d's stored.
        assert refused == [[jobs[2].id, jobs[3].id]] + [[jobs[2].id]] * (1 + len(RETRY_MS))
        assert writes[2:] == ([[jobs[2].id, jobs[3].id], [jobs[2].id], [jobs[3].id]]
                              + [[jobs[2].id]] * (1 + len(RETRY_MS)))
        c, d = [await world.store.get(job.id) for job in jobs[2:]]
        assert c is not None and d is not None
        assert (d.status, d.result) == ("done", {"n": 3})
        assert (c.status, c.code) == ("failed", "result_not_storable")
        assert "could not be stored" in (c.error or "")
        assert (await jobs[3].done).result == {"n": 3}
    run(main)


def test_queued_settles_claim_each_lanes_next_job_in_their_one_transaction() -> None:
    async def main() -> None:
        world, server = World(), Server(*["hold"] * (2 * len(LANES)))
        tab = world.open_tab(transport=server)
        firsts = [tab.side.enqueue_fetch("POST", f"/{lane}1", type=lane) for lane in LANES]
        seconds = [tab.side.enqueue_fetch("POST", f"/{lane}2", type=lane) for lane in LANES]
        await settle()
        assert server.holding == [f"/{lane}1" for lane in LANES]
        writes, gates = _first_commits_held(world)
        for lane in LANES:
            server.release(f"/{lane}1", Response(200, {"first": lane}))
        await settle()
        gates[0].set_result(None)
        await settle()
        gates[1].set_result(None)
        await settle()
        # c's and d's settles and the claims of c2 and d2, in one transaction.
        c1, d1, c2, d2 = firsts[2].id, firsts[3].id, seconds[2].id, seconds[3].id
        assert [c1, d1, c2, d2] in writes
        assert sorted(server.holding) == sorted(f"/{lane}2" for lane in LANES)
        for lane in LANES:
            server.release(f"/{lane}2", Response(200, {"second": lane}))
        await settle()
        results = [(await job.done).result for job in firsts + seconds]
        assert results == [{"first": lane} for lane in LANES] + [{"second": lane}
                                                                 for lane in LANES]
        assert sorted(server.paths) == sorted(f"/{lane}{n}" for lane in LANES for n in (1, 2))
    run(main)


#: What the fake transaction answers every settle of its batch.
STORED = settle_module._Stored([], False)


class _Queue:
    """A settler's queue alone, over a fake transaction: the first two transactions wait for
    their gate (``gates[0]``, ``gates[1]``; one future for both when ``one_gate``)."""

    def __init__(self, *, one_gate: bool = False) -> None:
        loop = asyncio.get_running_loop()
        self.settler = settle_module.Settler.__new__(settle_module.Settler)
        self.settler._queue, self.settler._committing = [], 0
        self.settler._commit_all = self._commit_all  # type: ignore[method-assign]
        self.committed: list[list[str]] = []
        gate: asyncio.Future[None] = loop.create_future()
        self.gates = [gate, gate] if one_gate else [loop.create_future(), loop.create_future()]

    async def _commit_all(self, batch: list[Any]) -> None:
        self.committed.append([item.job_id for item in batch])
        if len(self.committed) <= len(self.gates):
            await self.gates[len(self.committed) - 1]
        for item in batch:
            item.answer.set_result(STORED)

    def settles(self, n: int) -> list[asyncio.Future[Any]]:
        """``n`` settles j0, j1 … queued in order."""
        loop = asyncio.get_running_loop()
        return [asyncio.ensure_future(self.settler._queued(settle_module._Queued(
            f"j{i}", lambda _o: None,  # type: ignore[arg-type,return-value]
            None, None, 0.0,  # type: ignore[arg-type]
            loop.create_future()))) for i in range(n)]

    def idle(self) -> bool:
        return self.settler._committing == 0 and self.settler._queue == []


def test_a_cancelled_settle_waiting_its_turn_hands_the_turn_on() -> None:
    async def main() -> None:
        queue = _Queue(one_gate=True)
        tasks = queue.settles(5)
        await asyncio.sleep(0)
        assert queue.committed == [["j0"], ["j1"]]  # two transactions under way; j2..j4 wait
        tasks[2].cancel()  # waiting in the queue
        await asyncio.sleep(0)
        queue.gates[0].set_result(None)
        await asyncio.gather(*tasks, return_exceptions=True)
        # j0's end hands the turn to j3, j1's to j4 (both ended before j3 woke to take j4).
        assert queue.committed == [["j0"], ["j1"], ["j3"], ["j4"]]
        assert tasks[2].cancelled()
        assert all(t.result() is STORED for i, t in enumerate(tasks) if i != 2)
        assert queue.idle()
    run(main)


def test_a_turn_handed_to_a_settle_cancelled_before_it_woke_goes_to_the_next() -> None:
    async def main() -> None:
        queue = _Queue()
        tasks = queue.settles(4)
        await asyncio.sleep(0)
        queue.gates[0].set_result(None)
        await asyncio.sleep(0)  # j0 ends and hands the turn to j2 ...
        tasks[2].cancel()  # ... which is cancelled before it wakes to take it
        await asyncio.gather(tasks[0], tasks[2], return_exceptions=True)
        await asyncio.sleep(0)
        queue.gates[1].set_result(None)
        await asyncio.gather(*tasks, return_exceptions=True)
        assert tasks[2].cancelled() and ["j2"] not in queue.committed
        assert ["j3"] in queue.committed  # the turn went on to j3: no settle waits for ever
        assert queue.idle()
    run(main)


def test_a_settle_cancelled_just_before_its_turn_is_passed_over() -> None:
    # The waiter's task is cancelled, and a transaction ends before that task runs to leave the
    # queue: the turn goes to the next still waiting, and every other settle ends.
    async def main() -> None:
        queue = _Queue(one_gate=True)
        tasks = queue.settles(4)
        await asyncio.sleep(0)
        queue.gates[0].set_result(None)  # the transactions end first ...
        tasks[2].cancel()  # ... so j2's task has not yet run to leave when its turn comes
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert tasks[2].cancelled()
        assert [r for i, r in enumerate(results) if i != 2] == [STORED] * 3
        assert ["j3"] in queue.committed and not any("j2" in b for b in queue.committed)
        assert queue.idle()
    run(main)
