"""The Job handle: ``await job``, and ``job.done`` / ``job.stored`` shared by any number of waiters.

A waiter that gives up — ``asyncio.wait_for`` timing out, a cancelled task — must stop only
its own wait: the outcome still reaches every other waiter (our own PyScript and kernel test
pages wait with ``wait_for(job.done, t)``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyjobq import AbortSignal, Completion, Job, Outcome, PyjobqError, Status
from pyjobq.testing import World, run, settle


class Held:
    """A volatile executor that runs until :meth:`release`."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def __call__(self, signal: AbortSignal) -> Any:
        await self.release.wait()
        return "finished"


def test_a_wait_for_that_times_out_leaves_done_to_the_other_waiters() -> None:
    async def main() -> None:
        tab = World().open_tab()
        work = Held()
        job = tab.side.enqueue(work)
        early = asyncio.ensure_future(asyncio.wait_for(job.done, 30))  # waiting before the timeout
        await settle()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(job.done, 0.01)
        assert not job.done.done() and not job.done.cancelled()
        assert not early.done()
        work.release.set()
        outcome = await early
        assert outcome == Outcome(id=job.id, status=Status.DONE, result="finished")
        assert await job.done == outcome  # and a waiter that comes after
        assert job.done.done() and job.done.result() == outcome

    run(main)


def test_a_cancelled_waiter_leaves_done_and_await_job_to_the_others() -> None:
    async def main() -> None:
        tab = World().open_tab()
        work = Held()
        job = tab.side.enqueue(work)
        doomed = asyncio.ensure_future(_wait(job))
        other = asyncio.ensure_future(_wait(job))
        await settle()
        doomed.cancel()
        await settle()
        assert doomed.cancelled() and not job.done.done()
        work.release.set()
        assert (await other).status == "done"  # Status is a str enum: plain strings compare
        assert await job is await job.done
        assert isinstance((await job).status, Status)

    run(main)


async def _wait(job: Job) -> Outcome:
    return await job


def test_stored_survives_a_waiter_that_gives_up() -> None:
    async def main() -> None:
        tab = World().open_tab()
        job = tab.side.enqueue_fetch("POST", "/x")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(job.stored, 0)  # given up before the worker wrote it
        assert not job.stored.done()
        assert await job.stored is None
        assert job.stored.done() and job.stored.exception() is None

    run(main)


def test_gather_and_wait_take_completions_like_futures() -> None:
    async def main() -> None:
        tab = World().open_tab()
        jobs = [tab.side.enqueue(Held()) for _ in range(3)]
        for job in jobs:
            job._settle(Outcome(id=job.id, status="done", result=job.id))
        outcomes = await asyncio.gather(*(job.done for job in jobs))
        assert [o.result for o in outcomes] == [job.id for job in jobs]
        finished, pending = await asyncio.wait([asyncio.ensure_future(jobs[0].done)], timeout=1)
        assert len(finished) == 1 and not pending

    run(main)


def test_done_callbacks_get_the_completion_and_can_be_removed() -> None:
    async def main() -> None:
        job = Job("j1")
        seen: list[Completion[Outcome]] = []
        dropped: list[Completion[Outcome]] = []
        job.done.add_done_callback(seen.append)
        job.done.add_done_callback(dropped.append)
        assert job.done.remove_done_callback(dropped.append) == 1
        job._settle(Outcome(id="j1", status="cancelled", error="deleted", code="deleted"))
        await settle()
        assert seen == [job.done] and dropped == []
        assert seen[0].result().status is Status.CANCELLED
        late: list[Completion[Outcome]] = []
        job.done.add_done_callback(late.append)  # after it happened: called soon, once
        await settle()
        assert late == [job.done]

    run(main)


def test_cancelling_done_cancels_that_wait_only_never_the_job() -> None:
    """``job.done.cancel()`` is a future's cancel, of that one view (what asyncio's idioms do:
    cancel what ``asyncio.wait`` left pending); the job and every other view stay pending."""
    async def main() -> None:
        job = Job("j2")
        view = job.done
        assert view.cancel() is True and view.cancelled()
        with pytest.raises(asyncio.CancelledError):
            view.result()
        assert not job.done.done() and not job._done.done()
        finished, pending = await asyncio.wait([job.done], timeout=0)
        assert not finished and all(p.cancel() for p in pending)  # the usual idiom
        assert not job.done.done()
        assert repr(job) == "<Job j2 outstanding>"
        job._settle(Outcome(id="j2", status="failed", error="no"))
        assert repr(job) == "<Job j2 failed>"

    run(main)


def test_a_lost_outcome_raises_for_every_waiter() -> None:
    async def main() -> None:
        job = Job("j3")
        first, second = asyncio.ensure_future(_wait(job)), asyncio.ensure_future(_wait(job))
        await settle()
        job._lose(PyjobqError("the worker stopped"))
        for waiter in (first, second):
            with pytest.raises(PyjobqError, match="worker stopped"):
                await waiter
        assert repr(job) == "<Job j3 lost>"

    run(main)


def test_an_outcome_status_must_be_terminal() -> None:
    assert Outcome(id="a", status="done").status is Status.DONE
    with pytest.raises(PyjobqError, match="must be one of cancelled, done, failed, got 'running'"):
        Outcome(id="a", status="running")  # type: ignore[arg-type]


def test_a_waiter_resumes_in_the_first_step_after_its_job_settles() -> None:
    """Settling a job resolves each waiter's own future at once (no ``asyncio.shield`` and its
    extra step: under Pyodide's loop a page pays a browser task for every step): the waiting
    task runs before a task that only yields once after the settle."""
    async def main() -> None:
        job = Job("j")
        got: list[Any] = []

        async def wait_done() -> None:
            got.append(await job.done)

        async def wait_stored() -> None:
            got.append(await job.stored)

        waiters = [asyncio.ensure_future(wait_done()), asyncio.ensure_future(wait_stored())]
        await asyncio.sleep(0)  # both are waiting now
        outcome = Outcome(id="j", status=Status.DONE, result=1)
        job._store_ok()
        job._settle(outcome)
        await asyncio.sleep(0)
        assert got == [None, outcome]  # stored first, as settled
        await asyncio.gather(*waiters)
        assert await job.done == outcome and await job.stored is None  # and waiters after

    run(main)


def test_only_the_job_settles_its_private_futures() -> None:
    """A waiter is resolved by the Job's own methods (``_settle``, ``_lose``, ``_store_ok``,
    ``_store_failed``); a private future set anywhere else would leave its waiters waiting."""
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "pyjobq"
    setters = re.compile(r"\._(done|stored)\.(set_result|set_exception|cancel)\(")
    found = [f"{path.relative_to(package.parent)}:{n}"
             for path in sorted(package.rglob("*.py")) if path.name != "handle.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if setters.search(line)]
    assert found == []


def _count_steps(loop: asyncio.AbstractEventLoop) -> list[int]:
    """Counts the event loop's ``call_soon`` (under Pyodide's loop, a browser task each)."""
    count = [0]
    call_soon = loop.call_soon

    def counted(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return call_soon(*args, **kwargs)

    loop.call_soon = counted  # type: ignore[method-assign]
    return count


def test_gather_of_a_burst_costs_steps_per_burst_not_per_job() -> None:
    """``gather`` takes a completion as a future (no task of its own per job), and the
    done-callbacks of every job settled in one step run together in one step: a burst of
    100 ``stored`` costs a handful of event-loop steps, where a task per job cost three."""
    async def main() -> None:
        jobs = [Job(f"j{i}") for i in range(100)]
        assert all(asyncio.isfuture(job.stored) for job in jobs)
        together = asyncio.ensure_future(asyncio.gather(*(job.stored for job in jobs)))
        await asyncio.sleep(0)
        steps = _count_steps(asyncio.get_running_loop())
        for job in jobs:
            job._store_ok()
        assert await together == [None] * 100
        assert steps[0] <= 3, steps[0]  # the batch's step, the gather's waiter's wake-up

    run(main)


def test_a_cancelled_gather_stops_only_its_own_waits() -> None:
    async def main() -> None:
        jobs = [Job(f"j{i}") for i in range(3)]
        other = asyncio.ensure_future(asyncio.gather(*(job.done for job in jobs)))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(job.done for job in jobs)), 0.01)
        doomed = asyncio.ensure_future(asyncio.gather(*(job.done for job in jobs)))
        await asyncio.sleep(0)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        assert not other.done() and not any(job.done.done() for job in jobs)
        for job in jobs:
            job._settle(Outcome(id=job.id, status=Status.DONE, result=job.id))
        assert [o.result for o in await other] == ["j0", "j1", "j2"]
        assert [o.result for o in await asyncio.gather(*(job.done for job in jobs))] == [
            "j0", "j1", "j2"]

    run(main)


def test_cancelling_a_view_ends_the_waits_through_it_and_nothing_else() -> None:
    async def main() -> None:
        job = Job("j")
        view, kept = job.done, job.done
        assert view == kept and hash(view) == hash(job.done) and view is not kept
        called: list[bool] = []
        view.add_done_callback(lambda c: called.append(c.cancelled()))
        waiting = asyncio.ensure_future(_await(view))
        staying = asyncio.ensure_future(_await(kept))
        await asyncio.sleep(0)
        assert view.cancel("gave up") is True
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await settle()
        assert called == [True] and view.cancelled() and view.done()
        assert not kept.done() and not job.done.done() and not staying.done()
        with pytest.raises(asyncio.CancelledError):
            view.result()
        job._settle(Outcome(id="j", status=Status.DONE))
        assert (await staying).status is Status.DONE
        assert view.cancel() is False and kept.cancel() is False  # done: nothing to cancel

    run(main)


async def _await(completion: Completion[Outcome]) -> Outcome:
    return await completion


def test_a_callback_that_raises_is_reported_and_the_rest_still_run() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reported: list[BaseException] = []
        loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx["exception"]))
        jobs = [Job("a"), Job("b")]
        seen: list[str] = []

        def bad(_c: Completion[None]) -> None:
            raise ValueError("a broken callback")

        jobs[0].stored.add_done_callback(bad)
        jobs[1].stored.add_done_callback(lambda c: seen.append("b"))
        for job in jobs:
            job._store_ok()
        await settle()
        assert seen == ["b"] and [str(e) for e in reported] == ["a broken callback"]

    run(main)


def test_a_callback_runs_in_the_context_it_was_added_in() -> None:
    import contextvars

    who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")

    async def main() -> None:
        job = Job("j")
        seen: list[str] = []
        token = who.set("the adder")
        job.done.add_done_callback(lambda c: seen.append(who.get()))
        who.reset(token)
        job._settle(Outcome(id="j", status=Status.DONE))
        await settle()
        assert seen == ["the adder"]

    run(main)


def test_waiters_that_gave_up_do_not_pile_up_while_the_job_runs() -> None:
    async def main() -> None:
        job = Job("j")
        for _ in range(1000):
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(job.done, 0)
        assert len(job._done_once.views) < 130
        job._settle(Outcome(id="j", status=Status.DONE))
        assert (await job).status is Status.DONE

    run(main)


def test_every_one_of_many_waiters_wakes_and_a_kept_view_waits_again() -> None:
    """Found by review: the 64th waiter was pruned as it was added (its wait not yet
    registered), and never woke; a view kept across a timed-out wait was never watched again."""
    async def main() -> None:
        job = Job("j")

        async def waiter() -> Outcome:
            return await job.done

        waiters = [asyncio.ensure_future(waiter()) for _ in range(200)]
        kept = job.done
        for _ in range(70):  # polls that give up, as job.result(timeout=...) in a loop does
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(kept, 0.001)
        await asyncio.sleep(0)
        job._settle(Outcome(id="j", status=Status.DONE, result=1))
        finished, pending = await asyncio.wait(waiters, timeout=1)
        assert len(finished) == 200 and not pending
        assert (await kept).result == 1

    run(main)


def test_run_until_complete_takes_a_completion_on_a_loop_that_is_not_current() -> None:
    """Found by review: callbacks were posted to the current loop, not the completion's; one
    misposted batch then held every later callback of that loop."""
    import warnings

    loop = asyncio.new_event_loop()
    try:
        async def make() -> Job:
            job = Job("j")
            job._settle(Outcome(id="j", status=Status.DONE, result=1))
            return job

        job = loop.run_until_complete(make())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            assert loop.run_until_complete(job.done).result == 1
    finally:
        loop.close()
