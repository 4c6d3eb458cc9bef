"""pyjobq.testing keeps its promises: run()'s guarantees, ids, records, crash and freeze."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from pyjobq import AbortSignal
from pyjobq.core.status import Status
from pyjobq.testing import (
    T0,
    Response,
    UnretrievedError,
    World,
    record,
    run,
    sequential_ids,
    settle,
)


def test_run_returns_what_main_returns_and_takes_a_coroutine_too() -> None:
    async def main() -> int:
        return 7

    assert run(main) == 7
    assert run(main()) == 7


def test_run_fails_a_test_whose_task_died_unretrieved() -> None:
    async def main() -> None:
        async def boom() -> None:
            raise ValueError("nobody awaits me")

        asyncio.ensure_future(boom())
        await settle()

    with pytest.raises(UnretrievedError, match="nobody awaits me") as caught:
        run(main)
    assert len(caught.value.messages) == 1


def test_run_guards_against_a_hang_and_closes_its_loop() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def main() -> None:
        loops.append(asyncio.get_running_loop())
        await asyncio.Event().wait()

    with pytest.raises(TimeoutError):
        run(main, timeout_s=0.05)
    assert loops[0].is_closed()


def test_sequential_ids_name_jobs_and_restore_random_ids() -> None:
    async def main() -> None:
        tab = World().open_tab(transport=lambda *a: Response(200))
        with sequential_ids():
            first = tab.queue.enqueue_fetch("POST", "/a")
            second = tab.queue.enqueue_fetch("POST", "/b")
        later = tab.queue.enqueue_fetch("POST", "/c")
        assert (first.id, second.id) == ("id50000", "id50001")
        assert len(later.id) == 32
        await settle()
    run(main)


def test_record_is_a_stored_record_with_the_fields_named() -> None:
    pending = record("a", type="notes")
    assert pending.to_dict() | {} == {
        "id": "a", "type": "notes", "status": "pending", "attempts": 0, "max_attempts": 5,
        "created_at": T0, "updated_at": T0, "_reconstructor": "fetch",
        "_params": {"method": "POST", "path": "/a", "body": None}, "group": None, "label": None,
        "next_retry_at": T0, "result": None, "error": None, "http_status": None, "code": None,
        "given_back": 0, "cut_short": 0, "yield_lock": None, "owner": None, "key": None,
        "timeout_ms": None,
        "unauthorized_since": None,
    }
    failed = record("b", status="failed", attempts=5, error="HTTP 500", http_status=500)
    assert (failed.status, failed.next_retry_at, failed.attempts, failed.http_status) == (
        Status.FAILED, None, 5, 500)
    with pytest.raises(ValueError):
        record("c", status="nope")


def test_a_crash_cancels_the_running_job_of_the_tab_and_releases_its_locks() -> None:
    async def main() -> None:
        world = World()
        started: list[str] = []
        cancelled: list[str] = []

        def factory(params: Any) -> Any:
            async def execute(signal: AbortSignal) -> str:
                started.append(params["who"])
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    cancelled.append(params["who"])
                    raise
                return "never"
            return execute

        first = world.open_tab(reconstructors={"hang": factory})
        await settle()  # alone, it takes the processor lease
        second = world.open_tab(reconstructors={"hang": factory})
        job = first.queue.enqueue_persistent("hang", {"who": "x"})
        await settle()
        assert started == ["x"] and (await world.record(job.id))["status"] == "running"
        first.crash()
        await settle()
        assert cancelled == ["x"]  # the closure died with its tab
        assert world.live == [second] and world.violations == []
        assert world.locks.held() != {} and second.scheduler is not None
    run(main)


def test_a_frozen_tab_hears_nothing_until_it_resumes() -> None:
    async def main() -> None:
        world = World()
        first = world.open_tab(transport=lambda *a: _ok())
        await settle()
        second = world.open_tab()
        await settle()
        heard: list[str] = []
        second.queue.on_update(lambda u: heard.append(u["status"]))
        second.freeze()
        job = first.queue.enqueue_fetch("POST", "/a")
        assert (await job.done).status == "done"
        await settle()
        assert heard == [] and world.awake == [first]
        second.resume()
        await settle()
        assert "done" in heard
    run(main)


def test_a_frozen_tab_is_granted_a_lock_it_waited_for_and_runs_its_callback_on_resume() -> None:
    # As in Chromium: the grant is the lock manager's (the lock is held, others wait behind it),
    # the callback the page's, which runs nothing while frozen.
    async def main() -> None:
        world = World()
        first, second = world.open_tab(), world.open_tab()
        await settle()
        release = asyncio.Event()
        ran: list[str] = []

        async def hold(_lock: Any) -> None:
            await release.wait()

        async def callback(_lock: Any) -> None:
            ran.append("second")

        holding = asyncio.ensure_future(first.page_locks.request("x", hold))
        await settle()
        waiting = asyncio.ensure_future(second.page_locks.request("x", callback))
        await settle()
        second.freeze()
        release.set()
        await settle()
        assert second.page_locks.holds("x") and ran == []  # granted, not yet called back
        second.resume()
        await settle()
        assert ran == ["second"] and not second.page_locks.holds("x")
        await asyncio.gather(holding, waiting)
    run(main)


async def _ok() -> Response:
    return Response(200, {"ok": True})


def test_the_kit_imports_on_plain_cpython_without_pyodide() -> None:
    code = ("import sys, pyjobq.testing; "
            "assert 'js' not in sys.modules and 'pyodide' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_tab_resumed_a_moment_before_it_crashes_leaves_no_lease_request_behind() -> None:
    """Tab.resume runs the page's handler as the tab's own code: the lease request it starts dies
    with the tab. Started as the test's code, it outlived the crash, and the dead tab's page was
    granted the lease once the holder let go — held for ever (found by the simulation)."""
    from helpers import Server
    from pyjobq.testing import LOCK
    from pyjobq.testing import settle as settled

    async def main() -> None:
        world, server = World(), Server("hold")
        holder = world.open_tab(transport=server, page_lease=True)
        holder.side.enqueue_fetch("POST", "/held")  # the holder's run keeps the lease
        await settled()
        in_line = world.open_tab(transport=server, page_lease=True)
        await settled()
        assert holder.holds_lease and not in_line.holds_lease
        in_line.freeze()
        in_line.resume()  # its page asks for the lease again...
        in_line.crash()  # ...and the tab is gone before that request ran
        holder.crash()  # the lease is let go
        await settled()
        assert LOCK not in world.locks.held(), world.locks.held()

    run(main)
