"""The live notebook table (issue 26), on CPython: its throttle, its handles, and the queue's
table filling in once the store answers. In-memory fakes stand in for IPython's display and
for the event loop's timer; the queue runs on the memory adapters."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable, Mapping

from pyjobq import notebook
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


class FakeTimer:
    """``call_later`` on a clock moved by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.due: list[tuple[float, Callable[[], None]]] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> object:
        self.due.append((self.now + delay, callback))
        return None

    def advance(self, seconds: float) -> None:
        until = self.now + seconds
        while self.due and min(at for at, _ in self.due) <= until:
            self.due.sort(key=lambda d: d[0])
            self.now, callback = self.due.pop(0)
            callback()
        self.now = until


def live_tables(records: list[dict[str, str]], display: FakeDisplay, timer: FakeTimer,
                **kw: int) -> LiveTables:
    def render(view: View, retired: bool) -> Mapping[str, str]:
        return table_bundle(records, view, StoreState(answered=True), retired=retired)

    return LiveTables(render, show=display.show, call_later=timer.call_later,
                      interval_s=0.5, **kw)


def test_a_burst_of_10000_changes_is_drawn_a_handful_of_times_and_ends_current() -> None:
    records: list[dict[str, str]] = []
    display, timer = FakeDisplay(), FakeTimer()
    tables = live_tables(records, display, timer)
    tables.show(View())
    # 10,000 updates, arriving over 2 s of the fake clock (one every 0.2 ms).
    for n in range(10_000):
        records.append({"id": f"job-{n:05d}", "status": "done", "type": "burst"})
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
    reading = table_bundle([], View(), StoreState())
    assert notebook.READING in reading["text/html"]
    assert notebook.READING_EMPTY in reading["text/html"]
    assert "No jobs yet." not in reading["text/html"]
    whole = table_bundle([], View(), StoreState(answered=True))
    assert notebook.READING not in whole["text/html"] and "No jobs yet." in whole["text/html"]
    failed = table_bundle([], View(), StoreState(error="WorkerUnavailable: no worker"))
    assert "could not be read (WorkerUnavailable: no worker)" in failed["text/html"]


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


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
    out = run_python(FAKE_IPYTHON + """
    import asyncio, pyjobq
    from pyjobq.testing import Response

    gate = asyncio.Event()

    async def send(method, path, body):
        if path == "/slow":
            await gate.wait()
        return Response(200, {})

    pyjobq.configure(transport=send)
    from pyjobq import queue, notebook

    async def main():
        earlier = [await queue.enqueue_fetch("POST", f"/e{n}", label=f"earlier {n}").done
                   for n in range(3)]
        # A fresh kernel hears nothing of what was stored before it: forget it all.
        queue._known.clear(); queue._finished.clear()
        queue._store = notebook.StoreState()
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
        print("ok")

    asyncio.run(main())
    """)
    assert out.strip() == "ok"


def test_displayed_outside_an_event_loop_the_table_is_drawn_and_nothing_is_left_unawaited() -> None:
    done = subprocess.run([sys.executable, "-W", "error", "-c", textwrap.dedent(FAKE_IPYTHON + """
    from pyjobq import queue, notebook
    queue._ipython_display_()
    (drawn,) = outputs.values()
    assert notebook.READING in drawn[0]["text/html"], drawn
    print(queue._filling is None)
    """)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True" and "never awaited" not in done.stderr
