"""The live notebook table, on CPython: its throttle, its handles, and the queue's
table filling in once the store answers. In-memory fakes stand in for IPython's display and
for the event loop's timer; the queue runs on the memory adapters."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Mapping

from helpers import SLOW_TRANSPORT, main_runs, run_python
from pyjobq import notebook
from pyjobq.core import jobs_table
from pyjobq.notebook import LiveTables, StoreState, View, table_bundle

ROOT = Path(__file__).resolve().parent.parent


class FakeHandle:
    def __init__(self, bundle: Mapping[str, str]) -> None:
        self.drawn = [dict(bundle)]

    def update(self, bundle: Mapping[str, str]) -> None:
        self.drawn.append(dict(bundle))


class FakeDisplay:
    """What IPython's display keeps: every output shown, each with every drawing it got."""

    def __init__(self) -> None:
        self.outputs: list[FakeHandle] = []

    def show(self, bundle: Mapping[str, str]) -> FakeHandle:
        self.outputs.append(FakeHandle(bundle))
        return self.outputs[-1]


class FakeArmed:
    """One call armed on :class:`FakeTimer`; ``lost()`` stands for its event loop ending."""

    def __init__(self, timer: FakeTimer, at: float, callback: Callable[[], None]) -> None:
        self.timer, self.at, self.callback = timer, at, callback

    def pending(self) -> bool:
        return self in self.timer.due

    def lost(self) -> None:
        self.timer.due.remove(self)


class FakeTimer:
    """``call_later`` on a clock moved by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.due: list[FakeArmed] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeArmed:
        self.due.append(FakeArmed(self, self.now + delay, callback))
        return self.due[-1]

    def advance(self, seconds: float) -> None:
        until = self.now + seconds
        while self.due and min(d.at for d in self.due) <= until:
            self.due.sort(key=lambda d: d.at)
            armed = self.due.pop(0)
            self.now = armed.at
            armed.callback()
        self.now = until


def live_tables(records: list[dict[str, Any]], display: FakeDisplay, timer: FakeTimer,
                **kw: int) -> LiveTables:
    def render(view: View, retired: bool) -> Mapping[str, str]:
        return table_bundle(records, view, StoreState(answered=True), retired=retired)

    return LiveTables(render, show=display.show, call_later=timer.call_later,
                      interval_s=0.5, **kw)


def test_a_burst_of_10000_changes_is_drawn_a_handful_of_times_and_ends_current() -> None:
    records: list[dict[str, Any]] = []
    display, timer = FakeDisplay(), FakeTimer()
    tables = live_tables(records, display, timer)
    tables.show(View())
    # 10,000 updates, arriving over 2 s of the fake clock (one every 0.2 ms).
    for n in range(10_000):
        records.append({"id": f"job-{n:05d}", "status": "done", "type": "burst",
                        "created_at": n})
        tables.changed()
        timer.advance(0.0002)
    timer.advance(0.5)  # the last change is drawn within the interval
    (output,) = display.outputs
    assert tables.redraws == len(output.drawn) - 1
    assert 4 <= tables.redraws <= 5, tables.redraws  # 2 s / 0.5 s, not 10,000
    assert "10000 done" in output.drawn[-1]["text/plain"]
    assert "job-09999" in output.drawn[-1]["text/html"]
    timer.advance(10)
    assert len(output.drawn) - 1 == tables.redraws  # nothing left armed, nothing redrawn


def test_no_change_no_redraw_and_no_table_no_timer() -> None:
    display, timer = FakeDisplay(), FakeTimer()
    tables = live_tables([], display, timer)
    tables.changed()
    assert timer.due == []  # nothing shown: nothing to redraw
    tables.show(View())
    timer.advance(5)
    assert tables.redraws == 0 and len(display.outputs[0].drawn) == 1


def test_every_live_table_is_redrawn_with_its_own_view_and_the_oldest_retire() -> None:
    records = [{"id": "a", "status": "done", "type": "notes"},
               {"id": "b", "status": "failed", "type": "thumbs"}]
    display, timer = FakeDisplay(), FakeTimer()
    tables = live_tables(records, display, timer, max_live=2)
    tables.show(View())
    tables.show(View(status="failed"))
    assert "b" in display.outputs[1].drawn[0]["text/html"]
    assert ">a<" not in display.outputs[1].drawn[0]["text/html"]
    tables.show(View(type="notes"))  # the third: the first is drawn a last time, retired
    assert tables.live == 2
    assert notebook.RETIRED in display.outputs[0].drawn[-1]["text/html"]
    records.append({"id": "c", "status": "failed", "type": "notes"})
    tables.changed()
    timer.advance(0.5)
    first, second, third = display.outputs
    assert len(first.drawn) == 2  # shown, retired; no longer updated
    assert "1 failed" in second.drawn[0]["text/plain"] and "2 failed" in second.drawn[-1][
        "text/plain"]
    assert "1 done, 1 failed" in third.drawn[-1]["text/plain"]


def test_until_the_store_answers_the_table_says_it_is_not_the_whole_queue() -> None:
    reading = table_bundle([], View(), StoreState(reading=True))
    assert notebook.READING in reading["text/html"]
    assert notebook.READING_EMPTY in reading["text/html"]
    assert "No jobs yet." not in reading["text/html"]
    # Nothing reads it (no event loop could start the read): the caption says how to read it.
    unread = table_bundle([], View(), StoreState())
    assert notebook.READING not in unread["text/html"]
    assert "not read yet: `await queue.query_all()` lists every stored job" in unread["text/plain"]
    assert notebook.NOT_READ_EMPTY in unread["text/html"]
    assert "No jobs yet." not in unread["text/html"]
    whole = table_bundle([], View(), StoreState(answered=True))
    assert notebook.READING not in whole["text/html"] and "No jobs yet." in whole["text/html"]
    assert notebook.NOT_READ not in whole["text/html"]
    failed = table_bundle([], View(), StoreState(error="WorkerUnavailable: no worker"))
    assert "could not be read (WorkerUnavailable: no worker)" in failed["text/html"]
    assert "display the queue again to retry" in failed["text/html"]
    assert notebook.READING not in failed["text/html"] and "No jobs yet." not in failed["text/html"]


# An in-memory IPython.display, installed before the queue is displayed: it keeps every
# output and every update of it by display id, as a notebook front end does.
FAKE_IPYTHON = """
    import sys, types
    outputs = {}
    def display(obj, raw=False, display_id=None):
        assert raw and display_id is True
        key = f"display-{len(outputs)}"
        outputs[key] = [obj]
        class Handle:
            def update(self, obj, raw=False):
                assert raw
                outputs[key].append(obj)
        return Handle()
    ipython = types.ModuleType("IPython")
    ipython.display = types.ModuleType("IPython.display")
    ipython.display.display = display
    sys.modules["IPython"] = ipython
    sys.modules["IPython.display"] = ipython.display
"""


def test_queue_displays_a_table_that_fills_in_from_the_store_and_follows_its_jobs() -> None:
    main_runs(FAKE_IPYTHON + SLOW_TRANSPORT + """
    from pyjobq import queue, notebook

    async def main():
        earlier = [await queue.enqueue_fetch("POST", f"/e{n}", label=f"earlier {n}").done
                   for n in range(3)]
        # A fresh kernel hears nothing of what was stored before it: forget it all.
        queue._known.records.clear(); queue._known.finished.clear()
        queue._known.store = notebook.StoreState()
        queue._ipython_display_()
        (drawn,) = outputs.values()
        first = drawn[0]["text/html"]
        assert notebook.READING in first and "earlier" not in first, first
        for _ in range(100):
            await asyncio.sleep(0.05)
            if len(drawn) > 1 and notebook.READING not in drawn[-1]["text/html"]:
                break
        whole = drawn[-1]["text/html"]
        assert all(f"earlier {n}" in whole for n in range(3)), whole
        slow = queue.enqueue_fetch("POST", "/slow", label="slow one")
        for _ in range(100):
            await asyncio.sleep(0.05)
            if "slow one" in drawn[-1]["text/html"] and "running" in drawn[-1]["text/plain"]:
                break
        assert "1 running" in drawn[-1]["text/plain"], drawn[-1]
        gate.set()
        await slow.done
        for _ in range(100):
            await asyncio.sleep(0.05)
            if "4 done" in drawn[-1]["text/plain"]:
                break
        assert drawn[-1]["text/plain"] == "Background jobs: 4 done", drawn[-1]
        assert len(outputs) == 1  # the same output, redrawn
    """)


def test_displayed_outside_an_event_loop_the_table_is_drawn_and_nothing_is_left_unawaited() -> None:
    done = subprocess.run([sys.executable, "-W", "error", "-c", textwrap.dedent(FAKE_IPYTHON + """
    from pyjobq import queue, notebook
    queue._ipython_display_()
    (drawn,) = outputs.values()
    # Nothing can read the store here: the table says so, not that it is reading.
    assert notebook.NOT_READ in drawn[0]["text/html"], drawn
    assert notebook.READING not in drawn[0]["text/html"], drawn
    assert notebook.NOT_READ in repr(queue.table()) and notebook.NOT_READ in queue._repr_html_()
    print(queue._known.filling is None)
    """)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True" and "never awaited" not in done.stderr


def test_a_redraw_armed_on_a_loop_that_ended_is_armed_again() -> None:
    """The event loop that held the armed redraw ended before it fired (CPython's asyncio.run
    returning): the next change arms another, and the table is redrawn, not stuck."""
    records: list[dict[str, Any]] = [{"id": "a", "status": "running", "type": "t"}]
    display, timer = FakeDisplay(), FakeTimer()
    tables = live_tables(records, display, timer)
    tables.show(View())
    tables.changed()
    (armed,) = timer.due
    armed.lost()  # its loop ended: it will never fire
    records[0] = {"id": "a", "status": "done", "type": "t"}
    tables.changed()
    assert len(timer.due) == 1 and timer.due[0] is not armed
    timer.advance(0.5)
    (output,) = display.outputs
    assert tables.redraws == 1 and output.drawn[-1]["text/plain"] == "Background jobs: 1 done"


def test_a_table_draws_the_unfinished_and_the_newest_finished_jobs_and_counts_them_all() -> None:
    """Each redraw sends the whole table: it draws at most MAX_ROWS rows, the unfinished jobs
    first, then the newest finished; the caption counts every job and says what it shows."""
    done = [{"id": f"done-{n:05d}", "status": "done", "type": "t", "created_at": 1_000 + n}
            for n in range(10_000)]
    waiting = [{"id": f"wait-{n:02d}", "status": "pending", "type": "t", "created_at": n}
               for n in range(30)]
    running = [{"id": "run-0", "status": "running", "type": "t", "created_at": 50}]
    bundle = table_bundle(done + waiting + running, View(), StoreState(answered=True))
    html, plain = bundle["text/html"], bundle["text/plain"]
    assert html.count('<th scope="row"') == notebook.MAX_ROWS == 200
    assert all(f"wait-{n:02d}" in html for n in range(30)) and "run-0" in html
    newest = [f"done-{n:05d}" for n in range(10_000 - 169, 10_000)]
    assert all(job_id in html for job_id in newest)
    assert f"done-{10_000 - 170:05d}" not in html and "done-00000" not in html
    # The counts stay whole, in both renderings.
    assert "(30 pending, 1 running, 10000 done) — showing 200 of 10031" in html, html[:600]
    assert plain.startswith("Background jobs: 10000 done, 30 pending, 1 running (showing 200 of "
                            "10031: the unfinished jobs, then the newest finished)"), plain
    assert len(html) < 200_000  # 10,000 jobs or 1,000: one redraw stays this size
    small = table_bundle(done[:150], View(), StoreState(answered=True))["text/html"]
    assert small.count('<th scope="row"') == 150 and "showing" not in small


# The queue in a fresh interpreter, IPython's display faked (FAKE_IPYTHON), on the memory
# adapters; ``wait_for`` polls the last drawing of the one output.
QUEUE = FAKE_IPYTHON + """
    import asyncio, pyjobq
    from pyjobq.testing import Response

    async def wait_for(test, what):
        for _ in range(200):
            if outputs and test(list(outputs.values())[-1][-1]):
                return list(outputs.values())[-1][-1]
            await asyncio.sleep(0.025)
        raise AssertionError(f"never {what}: {outputs}")
"""

# QUEUE, its transport answering every request at once.
ANSWERED = QUEUE + """
    async def send(method, path, body):
        return Response(200, {})

    pyjobq.configure(transport=send)
    from pyjobq import queue, notebook
"""


def test_a_job_filed_while_the_table_reads_the_store_is_listed() -> None:
    """The store's answer predates the jobs filed after the read was asked: they are laid over
    it, not thrown away (the second one would have vanished until it changed again)."""
    main_runs(QUEUE + """
    gate = asyncio.Event()

    async def send(method, path, body):
        await gate.wait()
        return Response(200, {})

    pyjobq.configure(transport=send)
    from pyjobq import queue, notebook

    async def main():
        queue._ipython_display_()  # the read of every record is asked now
        first = queue.enqueue_fetch("POST", "/a", type="notes", label="first save")
        second = queue.enqueue_fetch("POST", "/b", type="notes", label="second save")
        await wait_for(lambda d: notebook.READING not in d["text/html"], "read")
        assert queue._known.store.answered
        # The second stays pending behind the first (one lane) and sends no news until then:
        # it is drawn because the answer did not throw it away.
        drawn = await wait_for(lambda d: "1 running, 1 pending" in d["text/plain"], "both drawn")
        assert "first save" in drawn["text/html"] and "second save" in drawn["text/html"], drawn
        gate.set()
        await first.done, await second.done
        await wait_for(lambda d: d["text/plain"] == "Background jobs: 2 done", "done")
    """)


def test_a_job_deleted_while_the_table_reads_the_store_is_not_drawn() -> None:
    """The store's answer may list a job deleted after the read was asked: the deletion heard
    meanwhile is laid over the answer (no ghost row in a table that says it is whole)."""
    main_runs(ANSWERED + """
    async def main():
        job = queue.enqueue_fetch("POST", "/x", label="doomed")
        kept = queue.enqueue_fetch("POST", "/y", label="kept")
        await job.done, await kept.done
        # A fresh kernel has heard of nothing.
        k = queue._known; k.records.clear(); k.finished.clear(); k.store = notebook.StoreState()
        queue._ipython_display_()  # the read is asked now, then the delete
        assert await queue.delete_job(job.id)
        await wait_for(lambda d: notebook.READING not in d["text/html"]
                       and "kept" in d["text/html"], "read")
        await asyncio.sleep(0.6)
        drawn = list(outputs.values())[-1][-1]
        assert "doomed" not in drawn["text/html"], drawn
        assert drawn["text/plain"] == "Background jobs: 1 done", drawn
        assert job.id not in queue._known.records
    """)


def test_what_is_heard_while_the_store_answers_is_laid_over_its_answer() -> None:
    """The merge itself, step by step: a deletion and an end heard are read from the store, and
    what that read found is laid over the older answer (a tombstone, the newer state), a job
    heard of only now is added, the newer of two states of a job is kept (news of the same age
    wins: it may carry progress), and a read dropped unawaited leaves nothing recording."""
    main_runs("""
    import asyncio, gc
    from pyjobq import queue

    def rec(job_id, status, at, **kw):
        return {"id": job_id, "status": status, "updated_at": at, "created_at": 1, **kw}

    async def main():
        side = queue._queue()
        answered = asyncio.Event()
        # The store once the news below was sent: gone deleted, moved done, filed added.
        stored = {"moved": rec("moved", "done", 2), "filed": rec("filed", "pending", 3),
                  "stale": rec("stale", "pending", 5), "tied": rec("tied", "running", 7)}

        async def slow_answer():  # the store's answer, as it was when asked
            await answered.wait()
            return [rec("gone", "done", 1), rec("moved", "running", 1), rec("stale", "pending", 5),
                    rec("tied", "running", 7)]

        async def get_job(job_id):
            return stored.get(job_id)

        side.query_all, side.get_job = slow_answer, get_job
        reading = asyncio.ensure_future(queue.query_all())
        for news in ({"id": "gone", "deleted": True}, rec("moved", "done", 2),
                     rec("filed", "pending", 3), rec("stale", "running", 4),
                     rec("tied", "running", 7, progress=0.5)):
            queue._known.remember(news)
        await asyncio.sleep(0.05)  # the read of what news said answers first
        answered.set()
        listed = await reading
        await asyncio.sleep(0.05)
        assert [r["id"] for r in listed] == ["gone", "moved", "stale", "tied"]  # as answered
        known = {job_id: r["status"] for job_id, r in queue._known.records.items()}
        assert known == {"moved": "done", "stale": "pending", "tied": "running",
                         "filed": "pending"}, known
        assert queue._known.records["tied"]["progress"] == 0.5
        assert len(queue._known.reads) == 0 and queue._known.store.answered
        dropped = queue.query_all()  # never awaited
        assert len(queue._known.reads) == 1
        dropped.close()
        del dropped
        gc.collect()
        assert len(queue._known.reads) == 0
    """)


def test_the_table_still_updates_after_an_event_loop_ended_with_a_redraw_or_a_read_due() -> None:
    """CPython's asyncio.run ends its loop with the redraw armed (or the read in flight): the
    next loop's news arms another, and asks the store again, instead of waiting for good."""
    out = run_python(ANSWERED + """
    async def first():
        queue._ipython_display_()
        await queue.enqueue_fetch("POST", "/a").done  # a redraw is armed; the loop ends

    async def second():
        await queue.enqueue_fetch("POST", "/b").done
        await wait_for(lambda d: d["text/plain"] == "Background jobs: 2 done", "redrawn")

    asyncio.run(first())
    asyncio.run(second())
    (drawn,) = outputs.values()

    # A read cut short by its loop's end: the next loop's news asks again.
    k = queue._known; k.records.clear(); k.finished.clear(); k.store = notebook.StoreState()

    async def third():
        queue._ipython_display_()  # asks the store; the loop ends before the answer

    async def fourth():
        await queue.enqueue_fetch("POST", "/c").done
        await wait_for(lambda d: d["text/plain"] == "Background jobs: 3 done", "whole")

    asyncio.run(third())
    assert not queue._known.store.answered
    asyncio.run(fourth())
    print("ok")
    """)
    assert out.strip() == "ok"


def test_repr_and_repr_html_read_the_store_where_an_event_loop_runs() -> None:
    """``repr(queue.table())``, ``print``, ``_repr_html_``: inside a loop they start the read
    their caption announces; outside one the caption says the store is not read, and how."""
    main_runs(ANSWERED + """
    async def stored():
        for n in range(3):
            await queue.enqueue_fetch("POST", f"/e{n}", label=f"earlier {n}").done

    asyncio.run(stored())
    k = queue._known; k.records.clear(); k.finished.clear(); k.store = notebook.StoreState()
    text = repr(queue.table())
    assert notebook.NOT_READ in text and notebook.READING not in text, text
    assert notebook.NOT_READ in queue._repr_html_()

    async def main():
        assert notebook.READING in repr(queue.table())  # ...and the read is under way
        for _ in range(100):
            await asyncio.sleep(0.02)
            if queue._known.store.answered:
                break
        html = queue._repr_html_()
        assert all(f"earlier {n}" in html for n in range(3)), html
        assert notebook.READING not in html and notebook.NOT_READ not in html
        assert str(queue.table(status="done")) == ("Background jobs: 3 done (status 'done')")
    """)


def test_a_failed_read_keeps_what_the_table_knew_and_says_how_to_retry() -> None:
    main_runs(ANSWERED + """
    async def main():
        await queue.enqueue_fetch("POST", "/a", label="heard of").done
        queue._known.store = notebook.StoreState(finished_kept=5)
        side = queue._queue()
        answer = side.query_all

        async def broken():
            raise pyjobq.StorageError("the database is closed")

        side.query_all = broken
        queue._ipython_display_()
        drawn = await wait_for(lambda d: "could not be read" in d["text/html"], "failed")
        assert "could not be read (StorageError: the database is closed)" in drawn["text/html"]
        assert "display the queue again to retry" in drawn["text/plain"], drawn
        assert "heard of" in drawn["text/html"] and "keeps only the newest 5" in drawn["text/html"]
        assert notebook.READING not in drawn["text/html"]
        await queue.enqueue_fetch("POST", "/b", label="later").done  # news asks no new read
        await asyncio.sleep(0.1)
        assert "could not be read" in queue._known.render(notebook.View(), False)["text/html"]
        side.query_all = answer
        queue._ipython_display_()  # displayed again: read again
        await wait_for(lambda d: d["text/plain"] == "Background jobs: 2 done", "read again")
    """)


def test_after_stop_the_table_says_it_no_longer_hears_other_tabs() -> None:
    main_runs(ANSWERED + """
    async def main():
        await queue.enqueue_fetch("POST", "/a").done
        queue._ipython_display_()
        await wait_for(lambda d: d["text/plain"] == "Background jobs: 1 done", "read")
        queue.stop()
        drawn = await wait_for(lambda d: notebook.STOPPED in d["text/html"], "stopped")
        assert "news from other tabs no longer reaches this table" in drawn["text/plain"], drawn
    """)


def test_a_table_of_a_status_or_type_that_cannot_be_refuses_it_and_says_what_to_pass() -> None:
    out = run_python("""
    import pyjobq
    from pyjobq import queue, Status
    for kw in ({"status": "error"}, {"status": "Failed"}, {"status": 3}, {"status": ["done"]},
               {"type": 3}, {"group": b"doc"}):
        try:
            queue.table(**kw)
        except pyjobq.InvalidJobError as exc:
            print(exc)
    assert queue.table(status=Status.FAILED).view.status == "failed"
    assert queue.table(type="notes", group="doc", status="done").view.describe() == (
        "type 'notes', group 'doc', status 'done'")
    """)
    lines = out.strip().splitlines()
    assert len(lines) == 6, out
    statuses = ("one of 'pending', 'running', 'paused', 'done', 'failed', 'cancelled', or None "
                "for every status")
    assert lines[0] == f"table(status): expected a status, {statuses}; got 'error' (str)"
    assert lines[1].endswith("got 'Failed' (str)") and lines[2].endswith("got 3 (int)")
    assert lines[3].endswith("got ['done'] (list)")
    assert lines[4] == ("table(type): expected a job type, a str: the type= the jobs were filed "
                        "with, or None for every type; got 3 (int)")
    assert lines[5].startswith("table(group): expected a group name, a str") and "bytes" in lines[5]


def test_a_live_table_reads_the_store_again_while_it_shows_an_unfinished_job() -> None:
    """News of an end or a deletion is lost for good when the tab that stored it crashed before
    broadcasting it: while a live table shows an unfinished job it reads those jobs' records
    again each jobs_table.RECHECK_MS — the unfinished statuses through their index, each other shown
    job by id, never the finished ones — so it ends on the store's truth (one job done, one
    deleted) with no news. Rows it does not ask about stay as heard (a done volatile job the
    store forgot, a running job's progress); once no table shows an unfinished job it stops."""
    main_runs(QUEUE + """
    from pyjobq import queue
    from pyjobq.core import jobs_table
    from pyjobq.core.status import Status

    def rec(job_id, status, at, **kw):
        return {"id": job_id, "status": status, "updated_at": at, "created_at": 1,
                "type": "t", "attempts": 0, "max_attempts": 5, **kw}

    async def main():
        side = queue._queue()
        stored = {"a": rec("a", "running", 1), "b": rec("b", "pending", 1),
                  "p": rec("p", "running", 1), "e": rec("e", "running", 1)}
        asked = []

        async def jobs(*, status=None, type=None, group=None):  # one status's index
            asked.append(status)
            return [dict(r) for r in stored.values() if status is None or r["status"] == status]

        async def get_job(job_id):
            asked.append(job_id)
            return dict(stored[job_id]) if job_id in stored else None

        side.jobs, side.get_job = jobs, get_job
        side.query_all = lambda: jobs()
        jobs_table.RECHECK_MS = 50
        await asyncio.sleep(0.2)
        assert asked == [], "no live table: the store is not read"
        await queue.query_all()  # a cell read the store before the table is shown
        # A volatile job this tab's engine ran and forgot once done: no read can confirm its end.
        queue._known.volatile_here.add("v")
        queue._known.remember(rec("v", "done", 1, volatile=True))
        queue._known.remember(rec("p", "running", 1, progress=0.5))  # progress is never stored
        asked.clear()
        queue._ipython_display_()
        await wait_for(lambda d: "3 running, 1 pending, 1 done" in d["text/plain"], "drawn")
        # a's end and b's deletion are stored by a tab that crashed before broadcasting them;
        # e failed in the same millisecond as the claim that was heard.
        stored["a"] = rec("a", "done", 2)
        del stored["b"]
        stored["e"] = rec("e", "failed", 1)
        truth = {"2 done", "1 failed", "1 running"}
        drawn = await wait_for(lambda d: set(d["text/plain"].split(": ")[1].split(", ")) == truth,
                               "the store's truth, with no news")
        assert ">b<" not in drawn["text/html"] and ">v<" in drawn["text/html"], drawn
        assert queue._known.records["p"]["progress"] == 0.5
        finished = [s for s in asked if s in ("done", "failed", "cancelled", None)]
        assert finished == [], f"finished records were read: {finished}"
        stored["p"] = rec("p", "done", 3)
        queue._known.remember(rec("p", "done", 3))  # news of the end: read, and the store agrees
        await asyncio.sleep(0.1)
        asked.clear()
        await asyncio.sleep(0.3)  # six periods: no table shows an unfinished job
        assert asked == [], f"read with nothing unfinished shown: {asked}"
    """)


def test_a_table_of_finished_jobs_reads_nothing_again() -> None:
    """A live table that shows only finished jobs (``status="failed"``) does not read the store
    again, whatever unfinished job another view would show."""
    main_runs(QUEUE + """
    from pyjobq import queue
    from pyjobq.core import jobs_table

    async def main():
        side = queue._queue()
        asked = []

        async def jobs(*, status=None, type=None, group=None):
            asked.append(status)
            return [{"id": "r", "status": "running", "updated_at": 1, "created_at": 1,
                     "type": "t"}] if status in (None, "running") else []

        async def get_job(job_id):
            asked.append(job_id)
            return None

        side.jobs, side.get_job = jobs, get_job
        side.query_all = lambda: jobs()
        jobs_table.RECHECK_MS = 50
        queue.table(status="failed")._ipython_display_()
        await wait_for(lambda d: notebook.READING not in d["text/html"], "read")
        asked.clear()
        await asyncio.sleep(0.3)
        assert asked == [], asked

    from pyjobq import notebook
    """)


def test_read_again_reads_by_id_and_for_many_the_unfinished_statuses() -> None:
    """``read_again``: a few jobs, each by id; more than READ_BY_ID, the unfinished statuses
    through their index, then by id only the jobs not among them. Never a finished status."""
    import asyncio

    class FakeQueue:
        def __init__(self, stored: dict[str, dict[str, Any]]) -> None:
            self.stored, self.asked = stored, []

        async def jobs(self, *, status: str | None = None) -> list[dict[str, Any]]:
            self.asked.append(status)
            return [dict(r) for r in self.stored.values() if r["status"] == status]

        async def get_job(self, job_id: str) -> dict[str, Any] | None:
            self.asked.append(job_id)
            return dict(self.stored[job_id]) if job_id in self.stored else None

    def rec(job_id: str, status: str) -> dict[str, Any]:
        return {"id": job_id, "status": status, "updated_at": 1.0}

    few = FakeQueue({"a": rec("a", "done"), "b": rec("b", "running")})
    found = asyncio.run(jobs_table.read_again(few, ["a", "b", "gone"]))
    assert found == {"a": rec("a", "done"), "b": rec("b", "running"), "gone": None}
    assert sorted(few.asked) == ["a", "b", "gone"]

    many_ids = [f"j{i}" for i in range(jobs_table.READ_BY_ID + 50)]
    stored = {i: rec(i, "pending") for i in many_ids[:-2]}
    stored[many_ids[-2]] = rec(many_ids[-2], "done")
    many = FakeQueue(stored)
    found = asyncio.run(jobs_table.read_again(many, many_ids))
    assert found[many_ids[0]] == rec(many_ids[0], "pending")
    assert found[many_ids[-2]] == rec(many_ids[-2], "done") and found[many_ids[-1]] is None
    unfinished = sorted(jobs_table.UNFINISHED)
    assert sorted(a for a in many.asked if a in jobs_table.UNFINISHED) == unfinished
    assert sorted(a for a in many.asked if a not in jobs_table.UNFINISHED) == sorted(many_ids[-2:])


# QUEUE, its store's reads faked: ``running(job_id, created_at)`` is a running job's record, and
# ``await shown(query_all, get_job, caption)`` makes those two the queue's reads, displays the
# queue (its live table reads its unfinished jobs again every 50 ms) and waits for ``caption``.
RE_READS = QUEUE + """
    from pyjobq import queue
    from pyjobq.core import jobs_table

    def running(job_id, created_at=1):
        return {"id": job_id, "status": "running", "updated_at": 1, "created_at": created_at,
                "type": "t"}

    async def shown(query_all, get_job, caption):
        side = queue._queue()
        side.query_all, side.get_job = query_all, get_job
        jobs_table.RECHECK_MS = 50
        queue._ipython_display_()
        await wait_for(lambda d: caption in d["text/plain"], "drawn")
"""


def test_a_read_that_never_answers_gives_way_to_the_next() -> None:
    """A live table's read of its unfinished jobs is given one period: one that never answers
    neither stops the reads after it nor keeps what is heard meanwhile."""
    main_runs(RE_READS + """
    async def main():
        calls = []
        stored = {"a": running("a")}

        async def query_all():
            return [dict(r) for r in stored.values()]

        async def get_job(job_id):
            calls.append(job_id)
            if len(calls) == 1:
                await asyncio.Event().wait()  # the first read never answers
            return dict(stored[job_id])

        await shown(query_all, get_job, "1 running")
        stored["a"] = {**stored["a"], "status": "done", "updated_at": 2}
        await wait_for(lambda d: d["text/plain"] == "Background jobs: 1 done", "read after a hang")
        assert len(calls) >= 2 and len(queue._known.reads) == 0, (calls, len(queue._known.reads))
    """)


def test_a_query_all_answer_older_than_a_re_read_does_not_draw_the_job_back() -> None:
    """A cell's ``query_all()`` asked before the table's re-read, answered after it: its answer
    predates what the re-read found, and the table keeps the newer state (before, that answer
    replaced it until the next period)."""
    main_runs(RE_READS + """
    async def main():
        stored = {"a": running("a"), "b": running("b", created_at=2)}
        late = asyncio.Event()
        slow = []

        async def query_all():
            answer = [dict(r) for r in stored.values()]  # as the store holds them when asked
            if slow:
                await late.wait()
            return answer

        async def get_job(job_id):
            return dict(stored[job_id]) if job_id in stored else None

        await shown(query_all, get_job, "2 running")
        slow.append(True)
        cell = asyncio.ensure_future(queue.query_all())  # asked now, answered late
        await asyncio.sleep(0)
        stored["a"] = {**stored["a"], "status": "done", "updated_at": 2}
        del stored["b"]  # stored by a tab that crashed before broadcasting either
        await wait_for(lambda d: d["text/plain"] == "Background jobs: 1 done", "re-read")
        late.set()
        listed = await cell
        assert [r["status"] for r in listed] == ["running", "running"]  # the cell's own answer
        # What the tables draw from now (the next period would mend it, so read it at once):
        kept = {job_id: r["status"] for job_id, r in queue._known.records.items()}
        assert kept == {"a": "done"}, kept
    """)


def test_a_re_read_is_not_laid_over_a_query_all_asked_after_it() -> None:
    """A ``query_all()`` asked after the re-read's requests went out is at least as new: what
    the re-read found (a job done, since deleted with its news lost) must not be laid over it,
    or the deleted job comes back, finished, never read again (found in review)."""
    main_runs(RE_READS + """
    async def main():
        stored = {"a": running("a"), "b": running("b", created_at=2)}
        b_gate, q_gate, a_read = asyncio.Event(), asyncio.Event(), asyncio.Event()
        slow_b, slow_q = [], []

        async def query_all():
            answer = [dict(r) for r in stored.values()]
            if slow_q:
                await q_gate.wait()
            return answer

        async def get_job(job_id):
            record = dict(stored[job_id]) if job_id in stored else None
            if job_id == "a" and slow_b:
                a_read.set()
            if job_id == "b" and slow_b:
                await b_gate.wait()
            return record

        await shown(query_all, get_job, "2 running")
        stored["a"] = {**stored["a"], "status": "done", "updated_at": 2}
        slow_b.append(True)
        await asyncio.wait_for(a_read.wait(), 5)  # the re-read read a: done
        del stored["a"]  # then a is deleted, its news lost too
        slow_q.append(True)
        cell = asyncio.ensure_future(queue.query_all())  # asked after the delete
        await asyncio.sleep(0)
        b_gate.set()
        slow_b.clear()  # the re-read ends
        await asyncio.sleep(0.01)
        q_gate.set()
        listed = await cell
        assert [r["id"] for r in listed] == ["b"]
        kept = {job_id: r["status"] for job_id, r in queue._known.records.items()}
        assert kept == {"b": "running"}, kept
    """)


def test_get_job_lists_a_record_as_query_all_does() -> None:
    """``get_job``: a job's record now, read from its store; a volatile job's marked ``volatile``
    as ``query_all()`` lists it (a table's row read again keeps its "this tab" mark)."""
    main_runs(QUEUE + """
    from pyjobq import queue

    async def main():
        hold = asyncio.Event()

        async def work(signal):
            await hold.wait()

        job = queue.enqueue(work, type="v")
        await asyncio.sleep(0.05)
        read = await queue.get_job(job.id)
        listed = [r for r in await queue.query_all() if r["id"] == job.id]
        assert read["volatile"] is True and listed[0]["volatile"] is True, (read, listed)
        assert str(read["status"]) == "running", read
        hold.set()
        await job.done
        assert await queue.get_job("no-such-job") is None
    """)
