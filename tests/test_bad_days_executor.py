"""Bad days on the executor side: work that grows with the backlog, refusals that come at once
rather than a timeout later, a suspension that keeps a job's backoff, a second ``configure``.

Each test failed before its fix; the engine's and the simulation's bad days are in
tests/test_bad_days.py and tests/test_simulation.py.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import Server
from pyjobq.core.codes import Code
from pyjobq.core.errors import ConfigurationError, InvalidJobError
from pyjobq.core.messages import RECHECK_MS
from pyjobq.core.outcome import Outcome
from pyjobq.handle import Job
from pyjobq.testing import Tab, World, record, run, settle

# ---------------------------------------------------------------- the recheck reads what is awaited


class _Counted:
    """Counts the requests a page sends its scheduler, by type, and the world's store reads."""

    def __init__(self, world: World, tab: Tab) -> None:
        self.requests: list[str] = []
        #: Each store read: its name and its first argument (the ids, for ``entries``).
        self.reads: list[tuple[str, Any]] = []
        link = tab.side.persistent.requests_link
        send = link.send

        def counted_send(message: dict[str, Any]) -> None:
            if "request_id" in message:
                self.requests.append(message["type"])
            send(message)

        link.send = counted_send  # type: ignore[method-assign]
        for name in ("get", "entries", "all", "by_status", "by_group"):
            setattr(world.store, name, self._counting(name, getattr(world.store, name)))

    def _counting(self, name: str, read: Callable[..., Any]) -> Callable[..., Any]:
        async def counted(*args: Any, **kw: Any) -> Any:
            self.reads.append((name, args[0] if args else None))
            return await read(*args, **kw)
        return counted

    def named(self, name: str) -> list[Any]:
        return [arg for read, arg in self.reads if read == name]

    def clear(self) -> None:
        self.requests.clear()
        self.reads.clear()


async def _outcome(job: Job) -> Outcome:
    return await job


def test_outstanding_handles_nobody_awaits_cost_no_reads_and_awaited_ones_one_batch() -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab()
        jobs = [tab.side.enqueue_fetch("POST", f"/later/{n}", delay_ms=10**9) for n in range(200)]
        await asyncio.gather(*(job.stored for job in jobs))
        await settle()
        counted = _Counted(world, tab)
        await world.advance(4 * RECHECK_MS)  # two minutes of a backlog nobody awaits
        assert counted.requests == [] and counted.named("get") == []

        waiting = [asyncio.ensure_future(_outcome(job)) for job in jobs[:3]]
        await settle()
        counted.clear()
        await world.advance(RECHECK_MS)
        assert counted.requests == ["ended_jobs"]  # one request for the three awaited
        # One read of the three in the store (the engine's own passes read their lanes too).
        awaited = [job.id for job in jobs[:3]]
        assert counted.named("entries").count(awaited) == 1 and counted.named("get") == []

        # The news of an end that never came (its tab crashed first): the recheck finds it.
        await world.store.delete_many([jobs[0].id])
        counted.clear()
        await world.advance(RECHECK_MS)
        assert counted.requests == ["ended_jobs"]
        assert counted.named("get") == [jobs[0].id]  # only the ended one is read whole
        outcome = (await asyncio.wait_for(jobs[0].done, 1))
        assert (outcome.status, outcome.code) == ("cancelled", "deleted")
        assert [w.done() for w in waiting] == [True, False, False]
        for w in waiting[1:]:
            w.cancel()
        await settle()
        counted.clear()
        await world.advance(RECHECK_MS)  # the waits given up: nothing is read any more
        assert counted.requests == [] and counted.named("get") == []
        assert not any(awaited[1] in (ids or ()) for ids in counted.named("entries"))
    run(main)


def test_ended_jobs_answers_the_ended_and_the_gone_and_refuses_ids_that_are_not_strings() -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab()
        later = tab.side.enqueue_fetch("POST", "/later", delay_ms=10**9)
        await later.stored
        await world.store.add([record("old", status="done", result=1)])
        client = tab.side.persistent
        found = await client.read_ended([later.id, "old", "gone", "old"])
        assert found == {"old": (await client.read("old")), "gone": None}
        assert found["old"]["status"] == "done"
        with pytest.raises(InvalidJobError, match=r"ended_jobs\(job_ids\): expected a list of "
                           r"job ids \(str\), got \['a', 5\]"):
            await client.read_ended(["a", 5])  # type: ignore[list-item]
    run(main)


# ---------------------------------------------------------------- a factory with no executor

@pytest.mark.parametrize("built", [None, 42, "run"], ids=["None", "int", "str"])
def test_a_reconstructor_that_returns_no_executor_fails_its_job_at_once_saying_so(
        built: Any) -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab(reconstructors={"thumbnail": lambda params: built})
        began = world.clock.now()
        job = tab.side.enqueue_persistent("thumbnail", {"w": 64})
        await settle()
        outcome = await asyncio.wait_for(job.done, 1)  # at once: no handshake deadline waited
        assert world.clock.now() == began
        assert (outcome.status, outcome.code) == ("failed", Code.RECONSTRUCTOR_RETURNED_NO_EXECUTOR)
        assert outcome.error == (
            f"reconstructor 'thumbnail' returned {built!r}, not an executor: have the factory "
            "return the job's async def run(signal) (a factory with no return statement "
            "returns None)")
        stored = await world.store.get(job.id)
        assert (stored.status.value, stored.attempts) == ("failed", 1)
    run(main)


# ---------------------------------------------------------------- the built-in kinds are pyjobq's

@pytest.mark.parametrize("name", ["fetch", "volatile"])
def test_register_reconstructor_refuses_the_names_of_pyjobqs_own_kinds(name: str) -> None:
    async def main() -> None:
        world = World()
        server = Server()
        tab = world.open_tab(transport=server)

        def factory(params: Any) -> Any:
            async def run(signal: Any) -> str:
                return "mine"
            return run

        with pytest.raises(ConfigurationError) as raised:
            tab.side.register_reconstructor(name, factory)
        assert str(raised.value) == (
            f"reconstructor {name!r}: pyjobq uses that name for its own jobs (fetch jobs, "
            "volatile jobs); choose another name (to change how fetch jobs are sent, give a "
            "transport: configure(transport=...) or set_transport())")
        job = tab.side.enqueue_fetch("POST", "/still-the-transport")
        assert (await asyncio.wait_for(job.done, 1)).status == "done"
        assert server.paths == ["/still-the-transport"]
    run(main)


def test_configure_refuses_a_reconstructor_named_for_a_built_in_kind() -> None:
    assert _python("""
        import pyjobq
        try:
            pyjobq.configure(reconstructors={"fetch": lambda params: None})
        except pyjobq.ConfigurationError as exc:
            print(exc)
        print(sorted(pyjobq.config.settings().reconstructors))
    """) == [
        "reconstructor 'fetch': pyjobq uses that name for its own jobs (fetch jobs, volatile "
        "jobs); choose another name (to change how fetch jobs are sent, give a transport: "
        "configure(transport=...) or set_transport())", "[]"]


# ---------------------------------------------------------------- a suspension keeps a backoff

def test_a_volatile_job_suspended_in_its_backoff_keeps_the_rest_of_it_on_resume() -> None:
    """The backoff is the retry policy's; a suspension says nothing about the job's work. A job
    waiting out its backoff when its type is suspended is due, on resume, when it was due
    before — or at once, if that time passed while it was suspended."""
    async def main() -> None:
        world = World()
        tab = world.open_tab()
        runs: list[float] = []

        async def flaky(signal: Any) -> str:
            runs.append(world.clock.now())
            if len(runs) < 3:
                raise RuntimeError("busy")
            return "ok"

        job = tab.side.enqueue(flaky, type="thumbs")
        await settle()
        failed_at = runs[0]
        due = (await tab.side.get_job(job.id))["next_retry_at"]
        assert failed_at + 1_000 <= due < failed_at + 1_300  # the ladder's first step
        await world.advance(400)
        await tab.side.suspend_type("thumbs")
        assert (await tab.side.get_job(job.id))["status"] == "paused"
        await tab.side.resume_type("thumbs")
        record = await tab.side.get_job(job.id)
        assert (record["status"], record["next_retry_at"]) == ("pending", due)
        await world.advance(due - world.clock.now() - 1)
        assert len(runs) == 1  # not run early: the rest of its backoff is waited out
        await world.advance(1)
        assert runs == [failed_at, due]

        # Suspended past the end of its backoff: due at once on resume.
        second_due = (await tab.side.get_job(job.id))["next_retry_at"]
        await tab.side.suspend_type("thumbs")
        await world.advance(60_000)
        assert len(runs) == 2
        await tab.side.resume_type("thumbs")
        await settle()
        assert runs[2] == world.clock.now() > second_due
        assert (await asyncio.wait_for(job.done, 1)).status == "done"
    run(main)


# ---------------------------------------------------------------- configure() again, outside a loop

def _python(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_configure_again_outside_a_running_loop_does_not_start_the_queue() -> None:
    """A script (or a notebook cell) that calls configure() again before it runs anything: the
    hooks it gives are the ones the queue starts with, later, inside the loop."""
    assert _python("""
        import asyncio, pyjobq
        from pyjobq.testing import Response

        async def first(method, path, body):
            return Response(500)

        async def second(method, path, body):
            return Response(200, {"sent_by": "second"})

        pyjobq.configure(transport=first)
        from pyjobq import queue
        pyjobq.configure(transport=second)  # again, outside a running loop
        print("configured")

        async def main():
            job = queue.enqueue_fetch("POST", "/x")
            print((await job.done).result)

        asyncio.run(main())
    """) == ["configured", "{'sent_by': 'second'}"]


def test_the_queue_used_outside_a_running_loop_on_cpython_says_so() -> None:
    assert _python("""
        import pyjobq
        from pyjobq import queue
        try:
            queue.enqueue_fetch("POST", "/x")
        except pyjobq.PyjobqError as exc:
            print(exc)
    """) == [
        "pyjobq's queue on CPython runs its scheduler on asyncio, in this process: start it "
        "from inside a running event loop (in an async def run by asyncio.run(), say); no "
        "event loop is running here"]
