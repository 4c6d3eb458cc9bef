"""Yielding (spec: "Yielding: persistent work that pauses while a lock is held"), on simulated tabs.

Two tabs share one LockHub, store, channel and FakeClock, both configured with
``yields={"heavy_decode": "app-foreground-priority"}``. A third lock context plays
the foreground work that takes the lock exclusively, with or without ``steal``.
No test here advances the clock to resume a job: resumption needs no timer.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Awaitable, Callable

from helpers import one_tab, reconstructor
from pyjobq import AbortSignal, Interrupted, Outcome, Terminal
from pyjobq.core.records import NewJob
from pyjobq.core.status import Status
from pyjobq.testing import Tab, World, run, settle

FOREGROUND = "app-foreground-priority"
YIELDS = {"heavy_decode": FOREGROUND}


class Foreground:
    """Foreground work on another page: holds the yield lock exclusively until released."""

    def __init__(self, world: World) -> None:
        self.locks = world.locks.client()
        self._release = asyncio.Event()
        self.request: asyncio.Future[Any] | None = None

    async def take(self, *, steal: bool = False) -> None:
        async def hold(_lock: Any) -> None:
            await self._release.wait()

        self.request = asyncio.ensure_future(self.locks.request(FOREGROUND, hold, steal=steal))
        await settle()

    async def release(self) -> None:
        self._release.set()
        await settle()
        assert self.request is not None and self.request.done() and self.request.exception() is None


class Decoder:
    """The ``decode`` reconstructor: a long executor that stops when its signal fires.

    Each run waits on ``finish`` or the signal. On abort it raises Interrupted —
    or, with ``terminal_on_abort``, Terminal.
    """

    def __init__(self) -> None:
        self.runs: list[tuple[Any, AbortSignal]] = []
        self.finish = asyncio.Event()
        self.terminal_on_abort = False

    def factory(self, params: Any) -> Callable[[AbortSignal], Awaitable[Any]]:
        async def execute(signal: AbortSignal) -> Any:
            self.runs.append((params, signal))
            finished = asyncio.ensure_future(self.finish.wait())
            await asyncio.wait({finished, asyncio.ensure_future(signal.wait())},
                               return_when=asyncio.FIRST_COMPLETED)
            if not finished.done():
                finished.cancel()
                if self.terminal_on_abort:
                    raise Terminal("this take cannot be resumed", code="not_resumable")
                raise Interrupted(f"stopped: {signal.reason}")
            return {"decoded": params["take"]}
        return execute


async def _note(signal: AbortSignal) -> Any:
    return "saved"


def _tab(world: World, decoder: Decoder) -> Tab:
    """A tab configured with the yield and the ``decode`` and ``note`` reconstructors."""
    return world.open_tab(reconstructors={"decode": decoder.factory, "note": lambda params: _note},
                          yields=YIELDS)


def _tabs(*, finished: bool = False,
          terminal_on_abort: bool = False) -> tuple[World, Decoder, Tab, Tab]:
    """A world, its decoder (its runs finishing at once if ``finished``) and two tabs (``_tab``)."""
    world, decoder = World(), Decoder()
    if finished:
        decoder.finish.set()
    decoder.terminal_on_abort = terminal_on_abort
    return world, decoder, _tab(world, decoder), _tab(world, decoder)


def _statuses_heard(tab: Tab) -> list[tuple[str, str, Any]]:
    heard: list[tuple[str, str, Any]] = []
    tab.side.on_update(lambda u: heard.append((u.id, u.status, u.get("yield_lock"))))
    return heard


def test_pending_jobs_park_while_the_lock_is_held_others_run_and_release_resumes_without_a_timer() -> None:  # noqa: E501
    async def main() -> None:
        world, decoder, a, b = _tabs()
        heard_in_b = _statuses_heard(b)
        foreground = Foreground(world)
        await foreground.take()

        first = a.side.enqueue_persistent("decode", {"take": 1}, type="heavy_decode",
                                          label="take 1")
        second = a.side.enqueue_persistent("decode", {"take": 2}, type="heavy_decode")
        note = a.side.enqueue_persistent("note", None, type="save")
        await settle()
        assert decoder.runs == []
        for job in (first, second):
            record = await world.record(job.id)
            assert (record["status"], record["yield_lock"], record["attempts"],
                    record["next_retry_at"]) == ("paused", FOREGROUND, 0, None)
        assert (await note.done).status == "done"  # other types run on
        assert (first.id, "paused", FOREGROUND) in heard_in_b
        assert (second.id, "paused", FOREGROUND) in heard_in_b
        assert not first.done.done() and not second.done.done()
        # One shared-mode request per lock context waits on the lock, however many jobs are parked.
        waiting = Counter(id(r.client) for r in world.locks._queue.get(FOREGROUND, []))
        assert waiting and all(mode == "shared" for mode in
                               {r.mode for r in world.locks._queue[FOREGROUND]})
        assert max(waiting.values()) == 1

        now = world.clock.now()
        decoder.finish.set()
        await foreground.release()  # no clock advance: the lock manager's grant wakes the scheduler
        assert world.clock.now() == now
        assert await first.done == Outcome(id=first.id, status="done", result={"decoded": 1})
        assert await second.done == Outcome(id=second.id, status="done", result={"decoded": 2})
        assert [params["take"] for params, _ in decoder.runs] == [1, 2]
        for job in (first, second):
            record = await world.record(job.id)
            assert (record["attempts"], record["given_back"], record["yield_lock"]) == (1, 0, None)
        assert (first.id, "pending", None) in heard_in_b and (first.id, "done", None) in heard_in_b
        assert world.violations == []
    run(main)


def test_a_job_filed_while_parked_parks_too_and_a_lock_held_shared_parks_nothing() -> None:
    async def main() -> None:
        world, decoder, a, _b = _tabs(finished=True)
        reader = world.locks.client()
        shared_release = asyncio.Event()

        async def hold(_lock: Any) -> None:
            await shared_release.wait()

        shared = asyncio.ensure_future(reader.request(FOREGROUND, hold, mode="shared"))
        await settle()
        job = a.side.enqueue_persistent("decode", {"take": 1}, type="heavy_decode")
        await settle()
        assert (await job.done).status == "done"  # only an exclusive holder makes the type yield
        shared_release.set()
        await settle()
        assert shared.done()
    run(main)


def _paused_record(job_id: str, now: float) -> Any:
    record = NewJob(id=job_id, reconstructor="decode", params={"take": 9},
                    type="heavy_decode").to_record(now)
    return record.evolve(status=Status.PAUSED, next_retry_at=None, yield_lock=FOREGROUND)


def test_a_tab_opened_later_unparks_a_job_paused_under_a_lock_nobody_holds() -> None:
    async def main() -> None:
        world, decoder = World(), Decoder()
        decoder.finish.set()
        await world.store.add([_paused_record("left-paused", world.clock.now() - 60_000)])
        tab = _tab(world, decoder)
        handle = tab.side.job("left-paused")
        await settle()
        assert await handle.done == Outcome(id="left-paused", status="done", result={"decoded": 9})
        record = await world.record("left-paused")
        assert (record["attempts"], record["yield_lock"]) == (1, None)
    run(main)


def test_a_tab_opened_while_the_lock_is_held_leaves_the_job_paused_until_release() -> None:
    async def main() -> None:
        world, decoder = World(), Decoder()
        decoder.finish.set()
        foreground = Foreground(world)
        await foreground.take()
        await world.store.add([_paused_record("left-paused", world.clock.now() - 60_000)])
        tab = _tab(world, decoder)
        await settle()
        assert (await world.record("left-paused"))["status"] == "paused"
        assert decoder.runs == []
        await foreground.release()
        assert (await world.record("left-paused"))["status"] == "done"
        assert tab.scheduler.in_flight == frozenset()
    run(main)


def test_a_steal_aborts_the_running_job_which_parks_then_completes_on_release_with_one_attempt() -> None:  # noqa: E501
    async def main() -> None:
        world, decoder, a, b = _tabs()
        heard_in_b = _statuses_heard(b)
        job = a.side.enqueue_persistent("decode", {"take": 1}, type="heavy_decode", max_attempts=1)
        await settle()
        record = await world.record(job.id)
        assert (record["status"], record["attempts"]) == ("running", 1)
        runner = a if record["owner"] == a.name else b
        # The executor's page holds the yield lock in shared mode for the length of the run.
        assert world.locks.held()[FOREGROUND] == "shared"
        assert [r.client for r in world.locks._held[FOREGROUND]] == [runner.page_locks]
        (_, signal), = decoder.runs

        foreground = Foreground(world)
        await foreground.take(steal=True)
        assert signal.aborted and FOREGROUND in str(signal.reason)
        record = await world.record(job.id)
        assert (record["status"], record["yield_lock"], record["attempts"],
                record["given_back"]) == ("paused", FOREGROUND, 0, 1)
        assert record["error"].startswith("stopped: ")
        assert (job.id, "paused", FOREGROUND) in heard_in_b
        assert not job.done.done()
        await world.advance(3_600_000)  # held for an hour: it stays parked
        assert len(decoder.runs) == 1 and (await world.record(job.id))["status"] == "paused"

        decoder.finish.set()
        await foreground.release()
        assert await job.done == Outcome(id=job.id, status="done", result={"decoded": 1})
        record = await world.record(job.id)
        # max_attempts=1 and it ran twice: the interrupted attempt cost nothing.
        assert (record["attempts"], record["given_back"], len(decoder.runs)) == (1, 1, 2)
        assert not decoder.runs[1][1].aborted
        assert world.violations == []
    run(main)


def test_an_interrupted_job_whose_lock_is_free_again_is_requeued_not_parked() -> None:
    async def main() -> None:
        world, decoder, a, _b = _tabs()
        job = a.side.enqueue_persistent("decode", {"take": 1}, type="heavy_decode")
        await settle()
        (_, signal), = decoder.runs
        decoder.finish.clear()
        signal.abort("the executor stopped itself")  # no lock is held: nothing to wait for
        await settle()
        assert len(decoder.runs) == 2  # pending again at once, and run again
        record = await world.record(job.id)
        assert (record["status"], record["attempts"], record["given_back"]) == ("running", 1, 1)
        decoder.finish.set()
        await settle()
        assert (await job.done).status == "done"
    run(main)


def test_terminal_fails_at_once_even_when_raised_on_a_steal() -> None:
    async def main() -> None:
        world, decoder, a, b = _tabs(terminal_on_abort=True)
        job = a.side.enqueue_persistent("decode", {"take": 1}, type="heavy_decode", max_attempts=5)
        await settle()
        foreground = Foreground(world)
        await foreground.take(steal=True)
        assert await job.done == Outcome(id=job.id, status="failed",
                                         error="this take cannot be resumed", code="not_resumable")
        record = await world.record(job.id)
        assert (record["attempts"], record["given_back"], record["yield_lock"]) == (1, 0, None)
        await foreground.release()
        assert len(decoder.runs) == 1
        assert (await world.record(job.id))["status"] == "failed"
    run(main)


def test_terminal_without_any_lock_fails_at_once() -> None:
    async def main() -> None:
        async def broken(params: Any, signal: AbortSignal) -> Any:
            raise Terminal("corrupt file")

        world, a = one_tab(reconstructors={"decode": reconstructor(broken)}, yields=YIELDS)
        job = a.side.enqueue_persistent("decode", {"take": 1}, type="heavy_decode", max_attempts=5)
        await settle()
        outcome = await job.done
        assert (outcome.status, outcome.error) == ("failed", "corrupt file")
        assert (await world.record(job.id))["attempts"] == 1
    run(main)
