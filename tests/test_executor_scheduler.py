"""The executor side and its scheduler, end to end on the memory fakes (no browser)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from helpers import Server, holding, one_tab, reconstructor, serving
from pyjobq import Outcome
from pyjobq.core.mode import RETENTION_MS
from pyjobq.handle import Job
from pyjobq.testing import Response, World, run, sequential_ids, settle
from store_contract import make_record

HOUR = 3600 * 1000.0


def test_a_fetch_job_runs_and_done_resolves() -> None:
    async def main() -> None:
        world, server, tab = serving(Response(201, {"id": 7}))
        job = tab.side.enqueue_fetch("post", "/items", {"name": "x"}, label="Create")
        await settle()
        assert await job.done == Outcome(id=job.id, status="done", result={"id": 7},
                                         http_status=201)
        assert server.calls == [("POST", "/items", {"name": "x"})]
        record = await world.store.get(job.id)
        assert (record.status, record.attempts, record.owner, record._params) == (
            "done", 1, None, {"method": "POST", "path": "/items", "body": {"name": "x"}})
    run(main)


def test_handshake_timeout_abandons_and_fails_naming_run_started() -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab(transport=Server(), handshake_timeout_ms=10_000)
        heard: list[dict[str, Any]] = []
        tab.page_link.subscribe(heard.append)
        # A page whose module never loaded: it never answers run.
        tab.side.persistent.router.handlers["run"] = lambda _msg: None
        job = tab.side.enqueue_fetch("GET", "/slow-module")
        await settle()
        assert (await world.store.get(job.id)).status == "running"
        await world.advance(9_999)
        assert (await world.store.get(job.id)).status == "running"
        await world.advance(1)
        outcome = await job.done
        assert (outcome.status, outcome.code) == ("failed", "handshake_timeout")
        assert "run_started never came" in outcome.error and "10000 ms" in outcome.error
        assert "'fetch'" in outcome.error
        assert [m["type"] for m in heard if m["type"] in ("run", "abandon_run")] == [
            "run", "abandon_run"]
        record = await world.store.get(job.id)
        assert (record.status, record.attempts, record._params) == (
            "failed", 1, {"method": "GET", "path": "/slow-module", "body": None})
    run(main)


def test_work_after_run_started_is_untimed() -> None:
    async def main() -> None:
        world, server, tab = serving("hold", handshake_timeout_ms=10_000)
        job = tab.side.enqueue_fetch("PUT", "/upload", {"big": True})
        await settle()
        for _ in range(5):
            await world.advance(HOUR)
        assert (await world.store.get(job.id)).status == "running"
        assert not job.done.done()
        server.release("/upload", Response(200, "stored"))
        await settle()
        assert await job.done == Outcome(id=job.id, status="done", result="stored", http_status=200)
    run(main)


def test_orphaned_reconstructor_fails_at_once_naming_it() -> None:
    async def main() -> None:
        world, tab = one_tab(transport=Server())
        job = tab.side.enqueue_persistent("decode_audio", {"take": 3}, max_attempts=5)
        await settle()
        outcome = await job.done
        assert (outcome.status, outcome.code) == ("failed", "orphaned")
        assert "no reconstructor 'decode_audio' is registered" in outcome.error
        record = await world.store.get(job.id)
        assert (record.attempts, record._params, record._reconstructor) == (
            1, {"take": 3}, "decode_audio")
    run(main)


def test_the_page_with_the_reconstructor_runs_what_another_page_filed() -> None:
    async def main() -> None:
        async def decode(params: Any, signal: Any) -> Any:
            return {"decoded": params["take"]}

        world, filer = one_tab(reconstructors={"decode_audio": reconstructor(decode)})
        job = filer.side.enqueue_persistent("decode_audio", {"take": 3})
        await settle()
        assert await job.done == Outcome(id=job.id, status="done", result={"decoded": 3})
    run(main)


async def tried_without_a_transport(max_attempts: int) -> tuple[World, Job]:
    """A tab configured with no transport, and its ``POST /x`` (``max_attempts``) tried once."""
    world, tab = one_tab(transport=None)
    job = tab.side.enqueue_fetch("POST", "/x", max_attempts=max_attempts)
    await settle()
    return world, job


def test_no_transport_error_says_how_to_configure_one() -> None:
    async def main() -> None:
        _, job = await tried_without_a_transport(max_attempts=1)
        outcome = await job.done
        assert (outcome.status, outcome.code, outcome.http_status) == (
            "failed", "no_transport", None)
        assert "configure(transport=" in outcome.error
    run(main)


def test_no_transport_retries_on_the_ladder_until_max_attempts() -> None:
    async def main() -> None:
        world, job = await tried_without_a_transport(max_attempts=3)
        assert (await world.store.get(job.id)).next_retry_at == world.clock.now() + 1000
        await world.advance(1000)
        await world.advance(2000)
        outcome = await job.done
        assert (outcome.status, outcome.code) == ("failed", "no_transport")
        assert (await world.store.get(job.id)).attempts == 3
    run(main)


@pytest.mark.parametrize("answer", [{"status": 200}, "OK", None, 200])
def test_a_transport_returning_a_non_response(answer: Any) -> None:
    async def main() -> None:
        async def transport(method: str, path: str, body: Any) -> Any:
            return answer

        world, tab = one_tab(transport=transport)
        job = tab.side.enqueue_fetch("GET", "/x", max_attempts=1)
        await settle()
        outcome = await job.done
        assert (outcome.status, outcome.code) == ("failed", "bad_transport_result")
        assert f"the transport returned {type(answer).__name__}, not a Response" in outcome.error
    run(main)


def test_an_executor_result_that_is_not_json_fails_at_once() -> None:
    async def main() -> None:
        async def odd(params: Any, signal: Any) -> Any:
            return {"when": object()}

        world, tab = one_tab(reconstructors={"odd": reconstructor(odd)})
        job = tab.side.enqueue_persistent("odd", None, max_attempts=5)
        await settle()
        outcome = await job.done
        assert (outcome.status, outcome.code) == ("failed", "result_not_cloneable")
        assert "the executor's result must be JSON-like" in outcome.error
        assert (await world.store.get(job.id)).attempts == 1
    run(main)


def test_an_executor_that_is_not_async_or_raises_on_its_call_ends_its_run_and_its_lane_goes_on(
) -> None:
    # Both escaped the run message's event: no run_result ever came, the handshake was already
    # answered and runs are untimed, so each job stayed running for good, its lane blocked.
    async def main() -> None:
        def not_async(params: Any) -> Any:
            def executor(signal: Any) -> str:  # `async` forgotten
                return "ok"
            return executor

        def raises(params: Any) -> Any:
            def executor(signal: Any) -> Any:
                raise ValueError("bad params")  # before any coroutine exists
            return executor

        world, server = World(), Server()
        tab = world.open_tab(transport=server,
                             reconstructors={"not_async": not_async, "raises": raises})
        sync = tab.side.enqueue_persistent("not_async", None, type="a", max_attempts=5)
        raising = tab.side.enqueue_persistent("raises", None, type="b", max_attempts=1)
        after = [tab.side.enqueue_fetch("POST", f"/after-{t}", type=t) for t in "ab"]
        await settle()
        first = await sync.done
        assert (first.status, first.code) == ("failed", "executor_not_async")
        assert "returned str, not an awaitable: define it with 'async def'" in first.error
        assert (await world.store.get(sync.id)).attempts == 1  # at once: the same again
        second = await raising.done
        assert (second.status, second.error) == ("failed", "ValueError: bad params")
        assert [(await job.done).status for job in after] == ["done", "done"]
        assert sorted(server.paths) == ["/after-a", "/after-b"]

        def plain(signal: Any) -> int:
            return 1

        closure = tab.side.enqueue(plain, type="v")  # a volatile job's own function, too
        assert (await closure.done).code == "executor_not_async"

        class Stop(BaseException):  # a framework's own, as pytest.fail() raises
            pass

        async def stops(signal: Any) -> None:
            await asyncio.sleep(0)
            raise Stop("stopped")

        stopped = tab.side.enqueue(stops, type="w", max_attempts=1)
        after_stop = tab.side.enqueue(volatile_ok, type="w")
        assert ((await stopped.done).status, (await stopped.done).error) == ("failed",
                                                                             "Stop: stopped")
        assert (await after_stop.done).status == "done"
    run(main)


async def volatile_ok(signal: Any) -> str:
    return "ok"


def test_http_errors_carry_status_and_the_body_code() -> None:
    async def main() -> None:
        world, server, tab = serving(Response(409, {"error": {"code": "version_conflict"}}))
        job = tab.side.enqueue_fetch("PUT", "/doc/1", {"v": 2})
        await settle()
        assert await job.done == Outcome(id=job.id, status="failed",
                                         error="PUT /doc/1 answered 409 (version_conflict)",
                                         http_status=409, code="version_conflict")
    run(main)


def test_delete_job_of_a_running_job_aborts_it_and_done_resolves_deleted() -> None:
    async def main() -> None:
        world, server, tab, job = await holding("/long")
        assert server.holding == ["/long"]
        assert await tab.side.delete_job(job.id) is True
        await settle()
        assert await job.done == Outcome(id=job.id, status="cancelled", error="deleted",
                                         code="deleted")
        assert server.cancelled == ["/long"]
        assert await world.store.all() == []
        assert tab.scheduler.in_flight == frozenset()
        assert await tab.side.delete_job(job.id) is False
    run(main)


def test_delete_from_another_tab_aborts_the_run_on_the_lease_holder() -> None:
    async def main() -> None:
        world, server, runner = serving("hold")
        viewer = world.open_tab(transport=server)
        job = runner.side.enqueue_fetch("POST", "/long")
        await settle()
        assert await viewer.side.delete_job(job.id) is True
        await settle()
        assert server.cancelled == ["/long"]
        assert await job.done == Outcome(id=job.id, status="cancelled", error="deleted",
                                         code="deleted")
        assert runner.scheduler.in_flight == frozenset()
    run(main)


def test_cleanup_old_deletes_only_done_records_older_than_7_days() -> None:
    async def main() -> None:
        world, tab = one_tab()
        await settle()  # its first pass swept the (empty) store; the next sweep is an hour away
        now = world.clock.now()
        old = now - RETENTION_MS - 1
        records = [
            make_record("done-old", status="done", updated_at=old, created_at=old),
            make_record("done-new", status="done", updated_at=now - 1000, created_at=old),
            make_record("failed-old", status="failed", updated_at=old, created_at=old, error="no",
                        code="x"),
            make_record("cancelled-old", status="cancelled", updated_at=old, created_at=old),
        ]
        await world.store.add(records)
        assert await tab.side.cleanup_old() == 1
        assert await world.store.all() == sorted(records[1:], key=lambda r: r.id)
        assert (await world.store.get("failed-old"))._params == records[2]._params
    run(main)


def test_retry_all_runs_failed_and_cancelled_jobs_again_with_a_fresh_budget() -> None:
    async def main() -> None:
        world, server, tab = serving(Response(403), Response(409))
        forbidden = tab.side.enqueue_fetch("POST", "/a", type="a")
        conflict = tab.side.enqueue_fetch("POST", "/b", type="b")
        await settle()
        assert [(await j.done).status for j in (forbidden, conflict)] == ["failed", "failed"]
        cancelled = tab.side.enqueue_fetch("POST", "/c", delay_ms=60_000)
        await settle()
        assert await tab.side.cancel_job(cancelled.id) is True
        assert await tab.side.retry_all() == 3
        await settle()
        for job in (forbidden, conflict, cancelled):
            record = await world.store.get(job.id)
            assert (record.status, record.attempts, record.error, record.code) == (
                "done", 1, None, None)
        assert await tab.side.retry_all() == 0
    run(main)


def test_lanes_two_types_side_by_side_one_type_serial() -> None:
    async def main() -> None:
        with sequential_ids():
            await lanes()

    async def lanes() -> None:
        world, server, tab = serving("hold", "hold", "hold")
        a1 = tab.side.enqueue_fetch("POST", "/a1", type="upload")
        a2 = tab.side.enqueue_fetch("POST", "/a2", type="upload")
        b1 = tab.side.enqueue_fetch("POST", "/b1", type="save")
        await settle()
        assert server.holding == ["/a1", "/b1"]
        server.release("/b1")
        await settle()
        assert server.holding == ["/a1"]
        assert (await b1.done).status == "done"
        assert (await world.store.get(a2.id)).status == "pending"
        server.release("/a1")
        await settle()
        assert server.holding == ["/a2"]
        server.release("/a2")
        await settle()
        assert [(await j.done).status for j in (a1, a2)] == ["done", "done"]
    run(main)


def test_scheduler_stop_then_a_worker_answer_is_dropped_without_error(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        world, server, tab, job = await holding("/x")
        tab.scheduler.stop()
        server.release("/x")
        await settle()
        assert (await world.store.get(job.id)).status == "running"
        assert not job.done.done()
    with caplog.at_level(logging.WARNING, logger="pyjobq"):
        run(main)
    assert caplog.records == []


def test_side_stop_closes_the_channel_but_its_own_answers_still_arrive(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        world, server, tab, job = await holding("/x")
        tab.side.stop()
        tab.side.stop()
        server.release("/x")
        await settle()
        assert (await job.done).status == "done"
    with caplog.at_level(logging.WARNING, logger="pyjobq"):
        run(main)
    assert caplog.records == []


def test_job_handle_for_an_already_finished_job() -> None:
    async def main() -> None:
        world, tab = one_tab(transport=Server(Response(422, {"code": "invalid"})))
        job = tab.side.enqueue_fetch("POST", "/x")
        await settle()
        first = await job.done
        tab.crash()
        reloaded = world.open_tab(transport=Server())
        again = reloaded.side.job(job.id)
        await settle()
        assert await again.done == first == Outcome(id=job.id, status="failed",
                                                    error="POST /x answered 422 (invalid)",
                                                    http_status=422, code="invalid")
        missing = reloaded.side.job("no-such-id")
        await settle()
        assert (await missing.done).code == "not_found"
    run(main)


def test_job_handle_after_reload_resolves_when_the_job_finishes() -> None:
    async def main() -> None:
        world, server, tab, job = await holding("/x")
        tab.crash()
        reloaded = world.open_tab(transport=server)
        handle = reloaded.side.job(job.id)
        await settle()
        assert server.cancelled == ["/x"]
        # The new page recovers the dead page's run (its attempt spent) and runs it again.
        assert await handle.done == Outcome(id=job.id, status="done", result={"ok": True},
                                            http_status=200)
        assert (await world.store.get(job.id)).attempts == 2
    run(main)


def test_a_job_update_reaches_another_tabs_callback_and_iterator() -> None:
    async def main() -> None:
        world, runner = one_tab(transport=Server())
        viewer = world.open_tab(transport=Server())
        seen: list[tuple[str, str]] = []
        unsubscribe = viewer.side.on_update(lambda u: seen.append((u.id, u.status)))
        stream = viewer.side.updates()
        first = asyncio.ensure_future(stream.__anext__())
        await settle()
        job = runner.side.enqueue_fetch("POST", "/x")
        await settle()
        assert seen == [(job.id, "pending"), (job.id, "running"), (job.id, "done")]
        update = await first
        assert (update.id, update.status, "_params" in update) == (job.id, "pending", False)
        assert [(u.id, u.status) for u in [await stream.__anext__(), await stream.__anext__()]] == \
            [(job.id, "running"), (job.id, "done")]
        await stream.aclose()
        unsubscribe()
        runner.side.enqueue_fetch("POST", "/y")
        await settle()
        assert len(seen) == 3
    run(main)


def test_a_crashed_lease_holders_run_is_recovered_by_the_next_tab() -> None:
    async def main() -> None:
        world, server, a = serving("hold")
        b = world.open_tab(transport=server)
        await settle()
        job = a.side.enqueue_fetch("POST", "/x")
        await settle()
        assert (await world.store.get(job.id)).owner == a.name
        a.crash()
        await settle()
        b.scheduler.wake()  # e.g. the online event, a retry timer or an enqueue
        await settle()
        record = await world.store.get(job.id)
        assert (record.status, record.attempts, record.owner) == ("done", 2, None)
    run(main)


def test_one_type_drains_in_filing_order_within_one_millisecond() -> None:
    async def main() -> None:
        with sequential_ids(descending=True):  # as a uuid4 may happen to sort
            world, server, tab = serving("hold", "hold", "hold")
            for path in ("/first", "/second", "/third"):
                tab.side.enqueue_fetch("POST", path, type="save")
            await settle()
            order = []
            for _ in range(3):
                order += server.holding
                server.release(server.holding[0])
                await settle()
            assert order == ["/first", "/second", "/third"]
    run(main)


def test_coming_back_online_runs_a_job_waiting_out_an_offline_failure_at_once() -> None:
    async def main() -> None:
        world, server, tab = serving(OSError("network unreachable"))
        world.online = False
        job = tab.side.enqueue_fetch("POST", "/x")
        await settle()
        waiting = await world.store.get(job.id)
        assert (waiting.status, waiting.attempts, waiting.code) == ("pending", 0, "offline")
        assert waiting.next_retry_at > world.clock.now()
        world.online = True
        tab.side.back_online()  # the page's `online` event, forwarded to its scheduler
        await settle()
        assert len(server.calls) == 2  # no clock moved: the online event alone ran it
        outcome = await job.done
        assert (outcome.status, outcome.code) == ("done", None)
        assert (await world.store.get(job.id)).attempts == 1
    run(main)


def test_progress_reported_in_the_executors_first_step_follows_run_started() -> None:
    """The executor's first step runs inside the ``run`` handler: a progress report
    there must still reach the engine after ``run_started``, never before it."""
    from pyjobq import report_progress
    from pyjobq.core.messages import make
    from pyjobq.executor.side import ExecutorSide
    from pyjobq.memory import ChannelHub, link_pair

    async def main() -> None:
        page_end, worker_end = link_pair()
        heard: list[str] = []
        worker_end.subscribe(lambda msg: heard.append(msg["type"]))

        async def work(signal: Any) -> str:
            report_progress(0.5)
            return "ok"

        side = ExecutorSide(link=page_end, channel=ChannelHub().channel("c"), source="s",
                            reconstructors={"k": lambda params: work})
        side.persistent.runner.run(make("run", job_id="j", reconstructor="k", params=None,
                                        job_type="t", attempt=1, claim="s:1"))
        await settle()
        assert heard == ["run_started", "progress", "run_result"]
    run(main)


def test_progress_is_coalesced_to_one_message_per_100_ms_and_its_last_report_goes_before_the_end(
) -> None:
    """A loop that reports progress on every item sent one message per call. Now: the first at
    once, then at most one per ``PROGRESS_EVERY_MS`` on the injected clock, the last report of
    a burst always sent (trailing edge), and one still waiting when the run ends goes out
    before its ``run_result`` — never after it, and nothing after it."""
    from pyjobq import report_progress
    from pyjobq.core.messages import make
    from pyjobq.executor.current import PROGRESS_EVERY_MS
    from pyjobq.executor.side import ExecutorSide
    from pyjobq.memory import ChannelHub, link_pair
    from pyjobq.testing import FakeClock

    async def main() -> None:
        clock = FakeClock()
        page_end, worker_end = link_pair()
        heard: list[Any] = []
        worker_end.subscribe(lambda msg: heard.append(
            msg.get("progress") if msg["type"] == "progress" else msg["type"]))
        step = asyncio.Event()
        late: list[asyncio.Task[None]] = []

        async def leftover() -> None:
            await step.wait()
            report_progress(0.99)  # a task the executor left behind, after the run ended

        async def work(signal: Any) -> str:
            for n in range(1, 6):
                report_progress(n / 10)
            await step.wait()
            step.clear()
            report_progress(0.6)
            report_progress(0.7)
            late.append(asyncio.ensure_future(leftover()))
            return "ok"

        assert PROGRESS_EVERY_MS == 100
        side = ExecutorSide(link=page_end, channel=ChannelHub().channel("c"), source="s",
                            clock=clock, reconstructors={"k": lambda params: work})
        side.persistent.runner.run(make("run", job_id="j", reconstructor="k", params=None,
                                        job_type="t", attempt=1, claim="s:1"))
        await settle()
        assert heard == ["run_started", 0.1]  # the first at once, the next four held
        clock.advance(99)
        await settle()
        assert heard == ["run_started", 0.1]
        clock.advance(1)
        await settle()
        assert heard == ["run_started", 0.1, 0.5]  # the burst's last, 100 ms after the first
        clock.advance(50)
        step.set()
        await settle()
        # 0.6 and 0.7 came 50 ms after the last one sent: held, and 0.7 sent as the run ended.
        assert heard == ["run_started", 0.1, 0.5, 0.7, "run_result"]
        step.set()
        clock.advance(1_000)
        await settle()
        assert late[0].done() and heard == ["run_started", 0.1, 0.5, 0.7, "run_result"]
    run(main)


def test_run_started_leaves_in_the_run_messages_own_event() -> None:
    """The handshake costs no extra event-loop turn: the page posts run_started while
    handling run, so it is delivered on the very next turn — and the executor's first step
    runs in that event too, so one that finishes there is answered there."""
    from pyjobq.core.messages import make
    from pyjobq.executor.side import ExecutorSide
    from pyjobq.memory import ChannelHub, link_pair

    async def main() -> None:
        page_end, worker_end = link_pair()
        heard: list[str] = []
        worker_end.subscribe(lambda msg: heard.append(msg["type"]))
        steps: list[str] = []

        async def work(signal: Any) -> str:
            steps.append("executor ran")
            return "ok"

        side = ExecutorSide(link=page_end, channel=ChannelHub().channel("c"), source="s",
                            reconstructors={"k": lambda params: work})
        side.persistent.runner.run(make("run", job_id="j", reconstructor="k", params=None,
                                        job_type="t", attempt=1, claim="s:1"))
        assert steps == ["executor ran"]  # its first step ran inside the handler
        await asyncio.sleep(0)  # one turn: what was posted during the handler is delivered
        assert heard == ["run_started", "run_result"]
        await settle()
        assert heard == ["run_started", "run_result"] and steps == ["executor ran"]
    run(main)


def test_a_handle_knows_its_jobs_last_progress_in_every_tab_and_keeps_it_once_done() -> None:
    from pyjobq import report_progress
    from pyjobq.testing import World

    async def main() -> None:
        world = World()
        going = asyncio.Event()

        async def work(signal: Any) -> str:
            report_progress(0.25)
            report_progress(0.75)
            await going.wait()
            return "ok"

        kinds = {"work": lambda params: work}
        a = world.open_tab(reconstructors=kinds)
        b = world.open_tab(reconstructors=kinds)
        await settle()
        job = b.side.enqueue_persistent("work")  # filed in b, run by a (it holds the lease)
        assert job.progress is None
        await settle()  # it runs: the first report goes at once, the second is held 100 ms
        assert job.progress == 0.25
        await world.advance(200)
        await settle()
        assert job.progress == 0.75
        assert a.side.job(job.id).progress is None  # a handle made later heard nothing yet
        going.set()
        assert (await asyncio.wait_for(job.done, 1)).status == "done"
        assert job.progress == 0.75
        volatile = b.side.enqueue(lambda signal: _reports(0.5))
        await asyncio.wait_for(volatile.done, 1)
        assert volatile.progress == 0.5
    run(main)


async def _reports(value: float) -> None:
    from pyjobq import report_progress
    report_progress(value)
