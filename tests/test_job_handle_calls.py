"""The Job handle as RQ, arq and Celery users expect: ``await job.result(timeout=)``,
``await job.status()``, ``job.cancel()``, ``job.retry()``, ``job.delete()``, for persistent
and volatile jobs, and ``pyjobq.jobs(status=, type=, group=)`` filtered by the engine that
reads the store.

The handle's calls settle nothing themselves: they wait on ``done`` like any waiter and ask
the queue what the module functions ask (tests/test_job_handle.py checks the source).
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from helpers import one_tab, reconstructor, serving
from pyjobq import AbortSignal, Code, Job, JobFailed, PyjobqError, Status, Terminal
from pyjobq.errors import JobFailed as PublicJobFailed
from pyjobq.errors import PyjobqError as Base
from pyjobq.testing import Response, World, run, settle

ROOT = Path(__file__).resolve().parent.parent


class Held:
    """A volatile executor that runs until :meth:`release` (or its signal aborts)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.runs = 0

    async def __call__(self, signal: AbortSignal) -> Any:
        self.runs += 1
        waiting = asyncio.ensure_future(self.release.wait())
        aborted = asyncio.ensure_future(signal.wait())
        await asyncio.wait({waiting, aborted}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        aborted.cancel()
        if signal.aborted:
            raise asyncio.CancelledError
        return "finished"


def test_job_failed_is_a_pyjobq_error_with_its_outcome() -> None:
    assert PublicJobFailed is JobFailed and issubclass(JobFailed, Base)


def test_result_returns_the_result_and_raises_job_failed_for_failed_and_cancelled() -> None:
    async def main() -> None:
        world, server, tab = serving(Response(200, {"id": 7}), Response(422, {"code": "bad_title"}))
        ok = tab.queue.enqueue_fetch("POST", "/notes", {"t": 1})
        assert await ok.result() == {"id": 7}
        bad = tab.queue.enqueue_fetch("POST", "/bad", {"t": 2})
        with pytest.raises(JobFailed) as failed:
            await bad.result()
        outcome = failed.value.outcome
        assert (outcome.status, outcome.http_status, outcome.code) == ("failed", 422, "bad_title")
        assert failed.value.code == "bad_title"
        assert str(failed.value) == (f"job {bad.id} ended failed (code bad_title), HTTP 422: "
                                     f"{outcome.error}")
        assert await bad.done == outcome  # done keeps working, with the same outcome

        volatile = tab.queue.enqueue(Held())
        await settle()
        assert await volatile.cancel() is True
        with pytest.raises(JobFailed, match="ended cancelled") as cancelled:
            await volatile.result()
        assert cancelled.value.outcome.status is Status.CANCELLED
    run(main)


def test_result_of_a_deleted_job_raises_job_failed_with_code_deleted() -> None:
    async def main() -> None:
        world, _, tab = serving("hold")
        job = tab.queue.enqueue_fetch("POST", "/slow")
        await settle()
        assert await job.delete() is True
        with pytest.raises(JobFailed) as deleted:
            await job.result()
        assert (deleted.value.outcome.status, deleted.value.code) == ("cancelled", Code.DELETED)
        assert await job.delete() is False  # nothing left to delete
    run(main)


def test_a_result_timeout_raises_timeout_error_and_the_job_keeps_running() -> None:
    async def main() -> None:
        world, tab = one_tab()
        held = Held()
        job = tab.queue.enqueue(held)
        other = asyncio.ensure_future(job.result())
        with pytest.raises(TimeoutError, match=rf"job {job.id} did not end within 0.01 s; it "
                                               "keeps running"):
            await job.result(timeout=0.01)
        assert not job.done.done() and not other.done()
        assert await job.status() is Status.RUNNING
        held.release.set()
        assert await other == "finished" and await job.result(timeout=5) == "finished"
        assert held.runs == 1
        for wrong in (-1, "1", True):
            with pytest.raises(PyjobqError,
                               match=r"job.result\(timeout\): expected a finite number"):
                await job.result(timeout=wrong)  # type: ignore[arg-type]
    run(main)


@pytest.mark.parametrize("wrong", [math.nan, math.inf, -math.inf, -0.5],
                         ids=["nan", "inf", "-inf", "negative"])
def test_a_result_timeout_that_is_not_a_finite_number_of_seconds_is_refused_at_once(
        wrong: float) -> None:
    """``timeout=nan`` compared false with everything and waited for ever; ``inf`` is None
    spelt another way: both are refused, saying what to pass."""
    async def main() -> None:
        tab = World().open_tab()
        job = tab.queue.enqueue(Held())
        with pytest.raises(ValueError) as raised:
            await asyncio.wait_for(job.result(timeout=wrong), 1)
        assert str(raised.value) == (
            f"job.result(timeout): expected a finite number of seconds >= 0, or None to wait "
            f"until the job ends; got {wrong!r}")
        assert not job.done.done()
        await job.cancel()
    run(main)


def test_status_reads_the_record_now_and_is_none_once_it_is_gone() -> None:
    async def main() -> None:
        world, server, tab = serving("hold", Response(500, {}))
        job = tab.queue.enqueue_fetch("POST", "/a", max_attempts=1)
        assert await job.status() is Status.PENDING  # filed, not yet claimed
        await settle()
        assert await job.status() is Status.RUNNING
        server.release("/a", Response(500, {}))
        assert (await job).status == "failed"
        assert await job.status() is Status.FAILED
        delayed = tab.queue.enqueue_fetch("POST", "/later", delay_ms=60_000)
        assert await delayed.status() is Status.PENDING
        assert await delayed.delete() is True
        assert await delayed.status() is None
    run(main)


def test_a_volatile_job_answers_done_once_its_engine_forgot_it_and_none_once_deleted() -> None:
    async def main() -> None:
        world, tab = one_tab()

        async def quick(signal: AbortSignal) -> str:
            return "quick"

        async def fails(signal: AbortSignal) -> None:
            raise Terminal("no")

        done = tab.queue.enqueue(quick)
        failed = tab.queue.enqueue(fails)
        assert await done.result() == "quick"
        assert tab.queue.volatile is not None
        assert await tab.queue.volatile.engine.store.get(done.id) is None  # forgotten
        assert await done.status() is Status.DONE
        with pytest.raises(JobFailed):
            await failed.result()
        assert await failed.status() is Status.FAILED  # kept until deleted
        assert await failed.delete() is True
        assert await failed.status() is None
    run(main)


def test_cancel_retry_and_delete_work_on_persistent_and_volatile_jobs() -> None:
    async def main() -> None:
        world, server, tab = serving(Response(500, {}))
        persistent = tab.queue.enqueue_fetch("POST", "/p", max_attempts=1)
        assert (await persistent).status == "failed"
        assert await persistent.retry() is True
        assert (await tab.queue.job(persistent.id).result()) == {"ok": True}  # a new handle
        assert await persistent.retry() is False  # done: nothing to retry
        assert await persistent.cancel() is False

        held = Held()
        volatile = tab.queue.enqueue(held)
        await settle()
        assert await volatile.cancel() is True and await volatile.cancel() is False
        assert await volatile.status() is Status.CANCELLED
        assert await volatile.retry() is True
        await settle()
        assert held.runs == 2 and await volatile.status() is Status.RUNNING
        assert await volatile.delete() is True
        assert await volatile.status() is None
    run(main)


def test_the_handle_job_id_gives_answers_the_same_calls() -> None:
    """``pyjobq.job(id)``: after a reload (a persistent job), and for a volatile job this tab
    filed (the same handle)."""
    async def main() -> None:
        world = World()
        calls: list[Any] = []

        async def execute(params: Any, signal: AbortSignal) -> Any:
            calls.append(params)
            return params

        first = world.open_tab(reconstructors={"echo": reconstructor(execute)})
        job = first.queue.enqueue_persistent("echo", {"n": 1}, delay_ms=60_000)
        await job.stored
        first.crash()
        second = world.open_tab(reconstructors={"echo": reconstructor(execute)})
        found = second.queue.job(job.id)
        assert await found.status() is Status.PENDING
        assert await found.cancel() is True
        with pytest.raises(JobFailed, match="cancelled"):
            await found.result()
        assert await second.queue.job(job.id).retry() is True
        await world.advance(0)
        assert await second.queue.job(job.id).result() == {"n": 1} and calls == [{"n": 1}]

        volatile = second.queue.enqueue(Held())
        assert second.queue.job(volatile.id) is volatile
    run(main)


def test_a_handle_made_by_hand_says_to_use_one_a_queue_made() -> None:
    async def main() -> None:
        job = Job("by-hand")
        for call in (job.status, job.cancel, job.retry, job.delete):
            with pytest.raises(PyjobqError, match="made by hand, not by a queue"):
                await call()
    asyncio.run(main())


def test_jobs_returns_the_matching_records_filtered_where_the_store_is_read() -> None:
    async def main() -> None:
        world, server, tab = serving(Response(200, {}), Response(500, {}))
        a = tab.queue.enqueue_fetch("POST", "/a", type="saves", group="doc-1")
        b = tab.queue.enqueue_fetch("POST", "/b", type="saves", group="doc-2", max_attempts=1)
        c = tab.queue.enqueue_fetch("POST", "/c", type="uploads", group="doc-1", delay_ms=60_000)
        await a.done, await b.done
        volatile = tab.queue.enqueue(Held(), type="saves")
        await settle()

        def ids(rows: list[dict[str, Any]]) -> list[str]:
            return [r["id"] for r in rows]

        # No full read: the status and group indexes answer, the type is matched on records.
        async def refused() -> Any:
            raise AssertionError("jobs(...) with a filter read every record")

        world.store.all = refused  # type: ignore[method-assign]
        assert ids(await tab.queue.jobs(status="done")) == [a.id]
        assert ids(await tab.queue.jobs(status="failed", type="saves")) == [b.id]
        assert ids(await tab.queue.jobs(group="doc-1")) == [a.id, c.id]
        assert ids(await tab.queue.jobs(group="doc-1", type="uploads")) == [c.id]
        assert ids(await tab.queue.jobs(status="running", type="saves")) == [volatile.id]
        rows = await tab.queue.jobs(status="pending")
        assert ids(rows) == [c.id] and rows[0]["status"] is Status.PENDING
        assert rows[0]["_params"]["path"] == "/c"  # as query_all lists them
        assert await tab.queue.jobs(status="paused") == []
        del world.store.all
        assert ids(await tab.queue.jobs(type="saves")) == [a.id, b.id, volatile.id]
        assert len(await tab.queue.jobs()) == 4
    run(main)


def test_pyjobq_jobs_checks_its_filters_at_the_call_like_the_table() -> None:
    code = textwrap.dedent("""
        import asyncio, pyjobq
        from pyjobq.testing import Response

        async def send(method, path, body):
            return Response(200, {})

        pyjobq.configure(transport=send)

        async def main():
            for wrong in ({"status": "finished"}, {"status": 3}, {"type": 1}, {"group": ["g"]}):
                try:
                    pyjobq.jobs(**wrong)
                except pyjobq.InvalidJobError as exc:
                    print(str(exc).split(":")[0])
            job = pyjobq.enqueue_fetch("POST", "/x", group="g")
            await job
            print([r["id"] == job.id for r in await pyjobq.jobs(status=pyjobq.Status.DONE,
                                                                group="g")])

        asyncio.run(main())
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["jobs(status)", "jobs(status)", "jobs(type)",
                                        "jobs(group)", "[True]"]
