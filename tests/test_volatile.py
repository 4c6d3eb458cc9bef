"""Volatile jobs (spec: "Where jobs run", "Suspending volatile work", "API"), on simulated tabs.

A volatile job's closure stays in its tab: it runs through the tab's second, in-tab
Scheduler over a MemoryStore nobody else holds. These tests drive it on the world's
FakeClock, so retry timing is asserted exactly and nothing sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import pytest

import pyjobq
import pyjobq.engine.scheduler as scheduler_module
from helpers import checkpointing, one_tab, reconstructor
from pyjobq import AbortSignal, Interrupted, Outcome, PyjobqError, Terminal
from pyjobq.core import backoff as backoff_module
from pyjobq.core.backoff import Backoff
from pyjobq.executor import report_progress
from pyjobq.testing import Tab, World, run, settle


async def volatile_record(tab: Tab, job_id: str) -> dict[str, Any] | None:
    """The engine's record; once done, the engine has forgotten it: then as it was published."""
    record = await tab.side.volatile.engine.store.get(job_id)
    if record is None:
        published = tab.published.get(job_id)
        return published
    return record.to_dict()


class Work:
    """A controllable executor: counts its calls, can be held open, honours its signal.

    While held it waits for either ``release()`` or its abort signal; on abort it
    waits for ``cleanup_done`` (so a test can see suspend_type wait for it), then
    raises Interrupted.
    """

    def __init__(self, *, result: Any = "ok", hold: bool = False) -> None:
        self.result = result
        self.hold = hold
        self.calls = 0
        self.signals: list[AbortSignal] = []
        self.release_event: asyncio.Event | None = None
        self.cleanup_done: asyncio.Event | None = None
        self.cleaning = False

    async def __call__(self, signal: AbortSignal) -> Any:
        self.calls += 1
        self.signals.append(signal)
        if self.hold:
            self.release_event = asyncio.Event()
            released = asyncio.ensure_future(self.release_event.wait())
            await asyncio.wait({released, asyncio.ensure_future(signal.wait())},
                               return_when=asyncio.FIRST_COMPLETED)
            if signal.aborted:
                released.cancel()
                if self.cleanup_done is not None:
                    self.cleaning = True
                    await self.cleanup_done.wait()  # e.g. saving a checkpoint before settling
                signal.raise_if_aborted()
        return self.result

    def release(self) -> None:
        assert self.release_event is not None
        self.hold = False
        self.release_event.set()


class FirstCall:
    """An executor whose first call is ``first(signal)`` and whose later calls return ``result``;
    ``calls`` counts them all."""

    def __init__(self, first: Callable[[AbortSignal], Awaitable[Any]], result: Any) -> None:
        self.first, self.result, self.calls = first, result, 0

    async def __call__(self, signal: AbortSignal) -> Any:
        self.calls += 1
        if self.calls == 1:
            return await self.first(signal)
        return self.result


# ---------------------------------------------------------------- enqueue


def test_a_volatile_job_runs_in_this_tab_and_is_never_stored() -> None:
    async def main() -> None:
        world, tab = one_tab()
        work = Work(result={"n": 1})
        job = tab.side.enqueue(work, label="thumbnail")
        assert isinstance(job.id, str) and job.id
        assert not job.done.done()
        await settle()
        assert await job.done == Outcome(id=job.id, status="done", result={"n": 1})
        assert work.calls == 1
        assert await world.store.all() == []
        assert world.store.raw() == {}
        assert await tab.side.volatile.engine.store.get(job.id) is None  # forgotten once published
        record = await volatile_record(tab, job.id)
        assert (record["status"], record["attempts"], record["_reconstructor"]) == (
            "done", 1, "volatile")
    run(main)


def test_query_all_lists_a_volatile_job_with_its_label_after_the_persistent_ones() -> None:
    async def main() -> None:
        async def note(params: Any, signal: Any) -> Any:
            return params

        world, tab = one_tab(reconstructors={"note": reconstructor(note)})
        stored = tab.side.enqueue_persistent("note", {"x": 1}, label="persisted")
        tab.side.enqueue(Work(hold=True), id="vol-1", label="Rendering preview", type="render")
        await settle()
        records = await tab.side.query_all()
        assert [(r["id"], r["label"], r.get("volatile", False)) for r in records] == [
            (stored.id, "persisted", False), ("vol-1", "Rendering preview", True)]
        assert records[1]["status"] == "running" and records[1]["type"] == "render"
        assert [r.id for r in await world.store.all()] == [stored.id]
    run(main)


def test_a_volatile_job_is_never_seen_by_another_tab() -> None:
    async def main() -> None:
        world = World()
        mine = world.open_tab()
        other = world.open_tab()
        heard_here: list[tuple[str, str, bool]] = []
        heard_there: list[Any] = []
        mine.side.on_update(lambda u: heard_here.append((u.id, u.status, u.get("volatile", False))))
        other.side.on_update(heard_there.append)
        job = mine.side.enqueue(Work(), label="local only")
        await settle()
        assert (await job.done).status == "done"
        assert heard_here == [(job.id, "pending", True), (job.id, "running", True),
                              (job.id, "done", True)]
        assert heard_there == []
        assert await other.side.query_all() == []
        assert other.side.volatile is None
    run(main)


def test_volatile_jobs_of_two_types_filed_together_both_start_at_once() -> None:
    async def main() -> None:
        world, tab = one_tab()
        decode, upload = Work(hold=True), Work(hold=True)
        jobs = [tab.side.enqueue(decode, type="decode"), tab.side.enqueue(upload, type="upload")]
        await settle()  # the clock does not move: both are due the moment they are filed
        assert (decode.calls, upload.calls) == (1, 1)
        assert [(await volatile_record(tab, j.id))["status"] for j in jobs] == [
            "running", "running"]
    run(main)


def test_a_duplicate_outstanding_id_returns_the_existing_job() -> None:
    async def main() -> None:
        world, tab = one_tab()
        first, second = Work(hold=True, result="first"), Work(result="second")
        job = tab.side.enqueue(first, id="render-42")
        again = tab.side.enqueue(second, id="render-42")
        assert again is job and again.done == job.done  # views of the one completion
        await settle()
        assert len(await tab.side.volatile.engine.store.all()) == 1
        first.release()
        await settle()
        assert await job.done == Outcome(id="render-42", status="done", result="first")
        assert second.calls == 0
    run(main)


def test_enqueue_rejects_a_non_callable_executor() -> None:
    async def main() -> None:
        tab = World().open_tab()
        with pytest.raises(pyjobq.InvalidJobError, match="executor must be an async callable"):
            tab.side.enqueue("not a function")  # type: ignore[arg-type]
    run(main)


# ---------------------------------------------------------------- backoff: one function for both


def test_both_schedulers_build_their_backoff_with_the_one_make_backoff(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Backoff] = []

    def spy(*args: Any, **kw: Any) -> Backoff:
        backoff = backoff_module.make_backoff(*args, **kw)
        made.append(backoff)
        return backoff

    monkeypatch.setattr(scheduler_module, "make_backoff", spy)

    async def main() -> None:
        world, tab = one_tab()
        tab.side.enqueue(Work())
        await settle()
        persistent, volatile = tab.scheduler.backoff, tab.side.volatile.engine.backoff
        assert persistent is not volatile
        assert made == [persistent, volatile]
        assert type(persistent) is type(volatile) is Backoff
        # Patching the ladder on the one class moves both schedulers' timing together.
        monkeypatch.setattr(Backoff, "step", lambda self, attempt: 7.0 * attempt)
        assert persistent.step(3) == volatile.step(3) == 21.0
    run(main)


def test_a_failing_volatile_job_climbs_the_same_ladder_then_fails_at_max_attempts() -> None:
    async def main() -> None:
        world, tab = one_tab()
        calls: list[float] = []

        async def flaky(signal: AbortSignal) -> Any:
            calls.append(world.clock.now())
            raise RuntimeError("decoder crashed")

        job = tab.side.enqueue(flaky, max_attempts=4)
        await settle()
        ladder = [tab.side.volatile.engine.backoff.step(n) for n in (1, 2, 3)]
        assert ladder == [1000.0, 2000.0, 4000.0]
        for attempt, step in enumerate(ladder, start=1):
            record = await volatile_record(tab, job.id)
            assert (record["status"], record["attempts"], record["error"]) == (
                "pending", attempt, "RuntimeError: decoder crashed")
            delay = record["next_retry_at"] - record["updated_at"]
            assert step <= delay < step * 1.3  # + up to 30 % jitter, as persistent jobs get
            await world.advance(delay - 1)
            assert len(calls) == attempt
            await world.advance(1)
            assert len(calls) == attempt + 1
        outcome = await job.done
        assert (outcome.status, outcome.error) == ("failed", "RuntimeError: decoder crashed")
        record = await volatile_record(tab, job.id)
        assert (record["status"], record["attempts"], record["next_retry_at"]) == (
            "failed", 4, None)
        await world.advance(3_600_000)
        assert len(calls) == 4
        assert await world.store.all() == []
    run(main)


def test_a_volatile_and_a_persistent_failure_get_the_same_delay_for_the_same_draw() -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab(transport=None)  # the persistent fetch job fails: no transport
        tab.side.enqueue(Work())  # make the volatile engine
        await world.advance(1)
        tab.side.volatile.engine.backoff = backoff_module.make_backoff(world.random)
        volatile_failing = tab.side.enqueue(_raiser(RuntimeError("x")), max_attempts=3)
        persistent_failing = tab.side.enqueue_fetch("POST", "/x", max_attempts=3)
        await settle()
        v = await volatile_record(tab, volatile_failing.id)
        p = (await world.store.get(persistent_failing.id)).to_dict()
        assert (v["next_retry_at"] - v["updated_at"] == p["next_retry_at"] - p["updated_at"]
                == 1000.0)
    run(main)


def _raiser(exc: BaseException) -> Callable[[AbortSignal], Awaitable[Any]]:
    async def execute(signal: AbortSignal) -> Any:
        raise exc
    return execute


# ---------------------------------------------------------------- how an attempt ends


def test_terminal_fails_at_once_whatever_max_attempts_says() -> None:
    async def main() -> None:
        world, tab = one_tab()
        job = tab.side.enqueue(_raiser(Terminal("unsupported codec", code="codec")), max_attempts=5)
        await settle()
        assert await job.done == Outcome(id=job.id, status="failed", error="unsupported codec",
                                         code="codec")
        record = await volatile_record(tab, job.id)
        assert (record["attempts"], record["given_back"], record["next_retry_at"]) == (1, 0, None)
    run(main)


def test_an_interrupted_attempt_nothing_asked_for_counts_and_is_retried_with_backoff() -> None:
    # Interrupted gives the attempt back only when the run's signal was aborted (a suspended
    # type, a stolen yield lock, a dropped run): raised unasked, it would otherwise run again
    # at once for ever, with no ceiling.
    async def main() -> None:
        world, tab = one_tab()

        async def yields(signal: AbortSignal) -> Any:
            raise Interrupted("yielded to the foreground")

        stops_once = FirstCall(yields, "finished")
        job = tab.side.enqueue(stops_once, max_attempts=2)
        await settle()
        record = await volatile_record(tab, job.id)
        assert (stops_once.calls, record["status"], record["code"]) \
            == (1, "pending", "interrupted_unasked")
        assert record["next_retry_at"] > world.clock.now()  # on the backoff ladder, not at once
        await world.advance(60_000)
        assert await job.done == Outcome(id=job.id, status="done", result="finished")
        assert stops_once.calls == 2

        at_the_ceiling = tab.side.enqueue(FirstCall(yields, "finished"), max_attempts=1)
        out = await asyncio.wait_for(at_the_ceiling.done, 5)
        assert (out.status, out.code) == ("failed", "interrupted_unasked")
        assert "signal was not aborted" in (out.error or "")
    run(main)


def test_an_interrupted_attempt_whose_signal_was_aborted_gives_the_attempt_back() -> None:
    async def main() -> None:
        world, tab = one_tab()

        async def asked(signal: AbortSignal) -> Any:
            signal.abort("the foreground asked")
            signal.raise_if_aborted()

        stops_once = FirstCall(asked, "finished")
        job = tab.side.enqueue(stops_once, max_attempts=1)
        await settle()  # no clock advance: an interrupted job is pending again now
        assert await job.done == Outcome(id=job.id, status="done", result="finished")
        record = await volatile_record(tab, job.id)
        assert (stops_once.calls, record["attempts"], record["given_back"]) == (2, 1, 1)
    run(main)


# ---------------------------------------------------------------- suspend_type / resume_type


def test_suspend_type_pauses_aborts_waits_for_the_executor_and_resume_finishes() -> None:
    async def main() -> None:
        world, tab = one_tab()
        side = tab.side
        running = Work(hold=True, result="decoded")
        running.cleanup_done = asyncio.Event()
        queued, other = Work(result="second"), Work(hold=True, result="other")
        first = side.enqueue(running, type="decode", label="take 1")
        await world.advance(1)  # filing order within one millisecond is not what this test is about
        second = side.enqueue(queued, type="decode")
        await world.advance(1)
        meanwhile = side.enqueue(other, type="upload")
        await settle()
        assert running.calls == 1 and other.calls == 1 and queued.calls == 0

        suspend = asyncio.ensure_future(side.suspend_type("decode"))
        await settle()
        assert running.signals[0].aborted
        assert "decode" in str(running.signals[0].reason)
        assert running.cleaning and not suspend.done()  # it waits for the executor to settle
        assert (await volatile_record(tab, second.id))["status"] == "paused"
        running.cleanup_done.set()
        await settle()
        assert suspend.done() and suspend.exception() is None

        record = await volatile_record(tab, first.id)
        assert (record["status"], record["attempts"], record["given_back"],
                record["yield_lock"]) == ("paused", 0, 1, None)
        assert not first.done.done() and not second.done.done()

        # Other types run on; a decode job filed while suspended is paused too.
        other.release()
        later = side.enqueue(Work(result="later"), type="decode")
        await settle()
        assert (await meanwhile.done).status == "done"
        assert (await volatile_record(tab, later.id))["status"] == "paused"
        await side.suspend_type("decode")  # twice is harmless
        await world.advance(3_600_000)
        assert running.calls == 1 and queued.calls == 0
        parked = [await volatile_record(tab, j.id) for j in (first, second, later)]
        assert {r["status"] for r in parked} == {"paused"}

        running.hold = False  # the second run finishes straight away
        await side.resume_type("decode")
        await settle()
        assert running.calls == 2  # the type's lane runs one at a time, oldest first
        assert not running.signals[1].aborted
        assert await first.done == Outcome(id=first.id, status="done", result="decoded")
        assert [(await j.done).result for j in (second, later)] == ["second", "later"]
        record = await volatile_record(tab, first.id)
        assert (record["attempts"], record["given_back"]) == (1, 1)
        assert await world.store.all() == []
    run(main)


def test_suspend_type_with_nothing_running_resolves_at_once() -> None:
    async def main() -> None:
        world, tab = one_tab()
        await tab.side.suspend_type("decode")
        job = tab.side.enqueue(Work(result=1), type="decode")
        await settle()
        assert (await volatile_record(tab, job.id))["status"] == "paused"
        await tab.side.resume_type("decode")
        await tab.side.resume_type("decode")
        await settle()
        assert (await job.done).result == 1
    run(main)


def test_suspend_type_touches_neither_persistent_jobs_nor_other_tabs() -> None:
    async def main() -> None:
        world = World()
        held: list[asyncio.Future[Any]] = []

        async def slow(params: Any, signal: AbortSignal) -> Any:
            fut = asyncio.get_running_loop().create_future()
            held.append(fut)
            return await fut

        tab = world.open_tab(reconstructors={"slow": reconstructor(slow)})
        other = world.open_tab(reconstructors={"slow": reconstructor(slow)})
        persistent = tab.side.enqueue_persistent("slow", None, type="decode")
        theirs = other.side.enqueue(Work(hold=True), type="decode")
        await settle()
        await tab.side.suspend_type("decode")
        await settle()
        assert (await world.store.get(persistent.id)).status == "running"
        assert (await volatile_record(other, theirs.id))["status"] == "running"
        held[0].set_result("ok")
        await settle()
        assert (await persistent.done).status == "done"
    run(main)


# ---------------------------------------------------------------- report_progress


def test_report_progress_travels_in_a_job_update_and_is_not_stored() -> None:
    async def main() -> None:
        world, tab = one_tab()
        seen: list[dict[str, Any]] = []
        tab.side.on_update(lambda u: seen.append(dict(u)) if "progress" in u else None)
        gate = asyncio.Event()

        async def decode(signal: AbortSignal) -> Any:
            report_progress(0.25, "frame 250 of 1000")
            await gate.wait()
            report_progress(7)  # clamped
            return "ok"

        job = tab.side.enqueue(decode)
        await settle()
        assert seen == [{"id": job.id, "status": "running", "progress": 0.25,
                         "progress_note": "frame 250 of 1000",
                         "progress_only": True, "volatile": True}]
        record = await volatile_record(tab, job.id)
        assert "progress" not in record and "progress_note" not in record
        gate.set()
        await settle()
        assert [u["progress"] for u in seen] == [0.25, 1.0]
        assert (await job.done).status == "done"
    run(main)


def test_persistent_progress_reaches_another_tab_and_is_not_stored() -> None:
    async def main() -> None:
        world = World()
        gate = asyncio.Event()

        async def decode(params: Any, signal: AbortSignal) -> Any:
            report_progress(0.5)
            await gate.wait()
            return "ok"

        runner = world.open_tab(reconstructors={"decode": reconstructor(decode)})
        viewer = world.open_tab(reconstructors={"decode": reconstructor(decode)})
        seen: list[tuple[str, Any]] = []
        viewer.side.on_update(
            lambda u: seen.append((u.id, u.get("progress"))) if "progress" in u else None)
        job = runner.side.enqueue_persistent("decode", None)
        await settle()
        assert seen == [(job.id, 0.5)]
        assert "progress" not in world.store.raw()[job.id]
        gate.set()
        await settle()
        assert (await job.done).status == "done"
    run(main)


def test_report_progress_outside_an_executor_or_with_a_non_number_raises() -> None:
    async def main() -> None:
        with pytest.raises(PyjobqError, match="outside a running job"):
            report_progress(0.5)
        tab = World().open_tab()
        errors: list[BaseException] = []

        async def bad(signal: AbortSignal) -> Any:
            try:
                report_progress("half")  # type: ignore[arg-type]
            except pyjobq.InvalidJobError as exc:
                errors.append(exc)
            return None

        job = tab.side.enqueue(bad)
        await settle()
        assert (await job.done).status == "done"
        assert len(errors) == 1 and "progress must be a number" in str(errors[0])
    run(main)


# ---------------------------------------------------------------- AbortSignal


def test_abort_signal_api() -> None:
    async def main() -> None:
        signal = AbortSignal()
        assert (signal.aborted, signal.reason) == (False, None)
        signal.raise_if_aborted()  # nothing yet
        heard: list[Any] = []
        signal.add_callback(heard.append)
        waiter = asyncio.ensure_future(signal.wait())
        awaited = asyncio.ensure_future(_await(signal))
        await settle()
        assert not waiter.done() and not awaited.done()
        signal.abort("type 'decode' suspended")
        signal.abort("a second reason is ignored")
        await settle()
        assert (signal.aborted, signal.reason) == (True, "type 'decode' suspended")
        assert heard == ["type 'decode' suspended"]
        assert waiter.result() == awaited.result() == "type 'decode' suspended"
        assert await signal == "type 'decode' suspended"  # already aborted: at once
        late: list[Any] = []
        signal.add_callback(late.append)
        assert late == ["type 'decode' suspended"]
        with pytest.raises(Interrupted, match="type 'decode' suspended") as raised:
            signal.raise_if_aborted()
        assert raised.value.interrupted is True and raised.value.terminal is False
        assert isinstance(raised.value, PyjobqError)
    run(main)


async def _await(signal: AbortSignal) -> Any:
    return await signal


# ---------------------------------------------------------------- volatile jobs by the same rules


def test_deleting_or_cancelling_a_job_a_suspension_waits_on_settles_it_once_its_executor_settles() -> None:  # noqa: E501
    """Spec: suspend_type "resolves when that executor settles" — also when the job is deleted or
    cancelled meanwhile: not before its executor (which heeds its signal) has settled, never
    never."""
    for verb in ("delete_job", "cancel_job"):
        async def main() -> None:
            world, tab = one_tab()
            cleanup = asyncio.Event()
            job = tab.side.enqueue(checkpointing(cleanup), type="decode")
            await settle()
            suspend = asyncio.ensure_future(tab.side.suspend_type("decode"))
            await settle()
            assert not suspend.done()
            assert await getattr(tab.side, verb)(job.id) is True
            await settle()
            assert not suspend.done(), f"{verb}: resolved while the executor was still saving"
            cleanup.set()
            await settle()
            assert suspend.done() and suspend.exception() is None, verb
            assert (await job.done).status == "cancelled"
        run(main)


def test_a_suspension_waiting_on_an_executor_that_ignores_its_signal_still_settles_after_a_delete() -> None:  # noqa: E501
    async def main() -> None:
        world, tab = one_tab()

        async def deaf(_signal: AbortSignal) -> None:
            await asyncio.Event().wait()  # never looks at its signal: cancelled when abandoned

        job = tab.side.enqueue(deaf, type="decode")
        await settle()
        suspend = asyncio.ensure_future(tab.side.suspend_type("decode"))
        await settle()
        assert not suspend.done()
        await tab.side.delete_job(job.id)
        await settle()
        assert suspend.done() and suspend.exception() is None
    run(main)


@pytest.mark.parametrize("status", ["failed", "cancelled", "done"])
def test_a_finished_id_can_be_used_again_for_a_new_volatile_job(status: str) -> None:
    async def main() -> None:
        world, tab = one_tab()
        calls: list[str] = []

        async def first(_signal: AbortSignal) -> str:
            calls.append("first")
            if status == "failed":
                raise Terminal("no")
            if status == "cancelled":
                await asyncio.Event().wait()
            return "one"

        async def second(_signal: AbortSignal) -> str:
            calls.append("second")
            return "two"

        old = tab.side.enqueue(first, id="save-1", type="t")
        await settle()
        if status == "cancelled":
            assert await tab.side.cancel_job("save-1")
            await settle()
        assert (await old.done).status == status
        new = tab.side.enqueue(second, id="save-1", type="t")
        assert new is not old
        assert await new.done == Outcome(id="save-1", status="done", result="two")
        assert calls == ["first", "second"]
    run(main)


def test_a_duplicate_outstanding_volatile_id_is_still_the_same_job() -> None:
    async def main() -> None:
        world, tab = one_tab()
        gate = asyncio.Event()

        async def held(_signal: AbortSignal) -> str:
            await gate.wait()
            return "x"

        job = tab.side.enqueue(held, id="k", type="t")
        await settle()
        assert tab.side.enqueue(held, id="k", type="t") is job
        gate.set()
        assert (await job.done).result == "x"
    run(main)


def test_a_volatile_failure_offline_costs_no_attempt_and_coming_back_online_runs_it_at_once() -> None:  # noqa: E501
    async def main() -> None:
        world, tab = one_tab()
        world.online = False  # navigator.onLine, read when the attempt fails
        calls = 0

        async def upload(_signal: AbortSignal) -> str:
            nonlocal calls
            calls += 1
            if not world.online:
                raise OSError("Failed to fetch")
            return "sent"

        job = tab.side.enqueue(upload, type="upload", max_attempts=1)
        await settle()
        record = await volatile_record(tab, job.id)
        assert (record["status"], record["attempts"], record["given_back"], record["code"]) == (
            "pending", 0, 1, "offline")
        world.online = True
        tab.side.back_online()  # the online event: due now, not at its ladder slot
        await settle()
        assert calls == 2
        assert (await job.done).result == "sent"
    run(main)


def test_the_volatile_engine_reads_the_pages_is_online_when_a_result_says_nothing() -> None:
    async def main() -> None:
        world, tab = one_tab()
        world.online = False
        tab.side.enqueue(lambda _s: asyncio.sleep(0), type="t")
        await settle()
        assert tab.side.volatile is not None and tab.side.volatile.engine is not None
        # its fallback is the page's reading, not "online"
        assert tab.side.volatile.engine.is_online() is False
    run(main)


def test_whatever_an_executor_raises_after_suspend_type_aborted_it_counts_as_interrupted() -> None:
    async def main() -> None:
        world, tab = one_tab()

        async def sloppy(signal: AbortSignal) -> str:
            await signal.wait()
            raise ValueError("stream closed")  # not Interrupted: it was stopped all the same

        job = tab.side.enqueue(FirstCall(sloppy, "resumed"), type="decode", max_attempts=1)
        await settle()
        await tab.side.suspend_type("decode")
        record = await volatile_record(tab, job.id)
        assert (record["status"], record["attempts"], record["given_back"]) == ("paused", 0, 1)
        assert not job.done.done()
        await tab.side.resume_type("decode")
        assert await job.done == Outcome(id=job.id, status="done", result="resumed")
    run(main)


def test_ten_thousand_finished_volatile_jobs_leave_nothing_behind_in_the_tab() -> None:
    # Finished volatile jobs are forgotten once published, so a tab's memory stays flat however
    # many it has run: nothing in the engine's store, no closure, no handle, no run kept.
    async def main() -> None:
        world, tab = one_tab()

        async def noop(signal: AbortSignal) -> None:
            return None

        for _batch in range(10):
            jobs = [tab.side.enqueue(noop, type="noop") for _ in range(1_000)]
            outcomes = await asyncio.gather(*(job.done for job in jobs))
            assert {o.status for o in outcomes} == {"done"}
        side = tab.side
        assert await side.volatile.engine.store.all() == []
        volatile = side.volatile
        assert volatile is not None
        assert (len(volatile.runner.closures), len(volatile.handles.jobs),
                len(volatile.runner.running)) == (0, 0, 0)
    run(main, timeout_s=120)


def test_the_in_tab_link_hands_a_steps_messages_over_together_in_order() -> None:
    """The volatile engine's link (``link_pair(copy=False)``): what one end sends in one step
    reaches the other in one later callback — one browser task under Pyodide's loop — in
    order; a worker's link (``copy=True``) schedules each message on its own; a closed end
    receives nothing."""
    from pyjobq.memory import link_pair
    from pyjobq.testing import run

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for copy, callbacks in ((False, 1), (True, 2)):
            page, engine = link_pair(copy=copy)
            heard: list[object] = []
            page.subscribe(heard.append)
            scheduled: list[object] = []
            call_soon = loop.call_soon

            def counting(callback: Any, *args: Any, **kwargs: Any) -> Any:
                scheduled.append(callback)
                return call_soon(callback, *args, **kwargs)

            loop.call_soon = counting  # type: ignore[method-assign]
            try:
                engine.send({"n": 1})
                engine.send({"n": 2})
            finally:
                loop.call_soon = call_soon  # type: ignore[method-assign]
            assert heard == []  # never in the sender's own step
            assert len(scheduled) == callbacks, copy
            await asyncio.sleep(0)
            assert heard == [{"n": 1}, {"n": 2}]
            page.close()
            engine.send({"n": 3})
            await asyncio.sleep(0)
            assert len(heard) == 2

    run(main)
