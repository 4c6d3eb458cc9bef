"""The worker's batched event loop (pyjobq/browser/batching.py) and the publisher's news order
(pyjobq/engine/publisher.py), on CPython: both are pure Python over the loop and the ports."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterator

import pytest

from pyjobq.browser import batching as drain
from pyjobq.core.messages import updated_jobs
from pyjobq.engine.publisher import NEWS_BATCH, Publisher
from pyjobq.testing import record, run


class BrowserTasks:
    """Stands in for the browser's task queue: each scheduled callback is one task,
    run on demand."""

    def __init__(self) -> None:
        self.queued: list[Callable[[], None]] = []
        self.ran = 0
        self.loop: asyncio.AbstractEventLoop

    def schedule(self, callback: Callable[[], None]) -> None:
        self.queued.append(callback)

    def run_one(self) -> None:
        self.ran += 1
        self.queued.pop(0)()


@pytest.fixture
def tasks() -> Iterator[BrowserTasks]:
    """The browser's task queue, with the batched event loop installed on a new loop (``.loop``)."""
    tasks = BrowserTasks()
    tasks.loop = asyncio.new_event_loop()
    drain.install(tasks.loop, schedule=tasks.schedule)
    yield tasks
    tasks.loop.close()


def test_ready_callbacks_and_what_they_make_ready_run_in_one_browser_task_in_order(
        tasks: BrowserTasks) -> None:
    loop = tasks.loop
    seen: list[str] = []

    def second() -> None:
        seen.append("second")
        loop.call_soon(seen.append, "made ready by second")

    loop.call_soon(seen.append, "first")
    loop.call_soon(second)
    cancelled = loop.call_soon(seen.append, "cancelled")
    cancelled.cancel()
    loop.call_soon(seen.append, "third")
    assert len(tasks.queued) == 1  # one browser task for all of them
    tasks.run_one()
    assert seen == ["first", "second", "third", "made ready by second"]
    assert tasks.queued == [] and tasks.ran == 1


def test_what_a_handler_makes_ready_runs_as_it_returns_and_asks_no_browser_task(
        tasks: BrowserTasks) -> None:
    """Inside pyjobq's event handler (drain.event) a call_soon asks no browser task: what it
    made ready runs as the outermost handler returns, in the same event."""
    loop = tasks.loop
    seen: list[str] = []
    asyncio.set_event_loop(loop)
    try:
        with drain.event():
            loop.call_soon(seen.append, "made ready by the handler")
            with drain.event():  # a handler inside a handler: the outer one runs it all
                loop.call_soon(seen.append, "by the inner one")
            assert seen == [] and tasks.queued == []
        assert seen == ["made ready by the handler", "by the inner one"]
        assert tasks.queued == [] and tasks.ran == 0
        loop.call_soon(seen.append, "outside any handler")  # as before: a browser task
        assert len(tasks.queued) == 1
    finally:
        asyncio.set_event_loop(None)


def test_a_batch_gives_the_browser_its_turn_after_the_budget(tasks: BrowserTasks,
                                                             monkeypatch: Any) -> None:
    loop = tasks.loop
    now = [0.0]
    monkeypatch.setattr(drain.time, "monotonic", lambda: now[0])
    seen: list[int] = []

    def slow(n: int) -> None:
        seen.append(n)
        now[0] += drain.BUDGET_MS / 1000 / 2  # each takes half the budget

    for n in range(5):
        loop.call_soon(slow, n)
    tasks.run_one()
    assert seen == [0, 1] and len(tasks.queued) == 1  # the rest goes on in the next task
    tasks.run_one()
    tasks.run_one()
    assert seen == [0, 1, 2, 3, 4] and tasks.queued == []


def test_a_callback_that_raises_is_reported_and_the_batch_goes_on(tasks: BrowserTasks) -> None:
    loop = tasks.loop
    reported: list[Any] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context["exception"]))
    seen: list[str] = []

    def boom() -> None:
        raise ValueError("boom")

    loop.call_soon(boom)
    loop.call_soon(seen.append, "after")
    tasks.run_one()
    assert seen == ["after"] and [str(e) for e in reported] == ["boom"]


def test_installing_twice_changes_nothing(tasks: BrowserTasks) -> None:
    loop = tasks.loop
    patched = loop.call_soon
    drain.install(loop, schedule=tasks.schedule)
    assert loop.call_soon is patched


class Recorder:
    def __init__(self, log: list[tuple[str, Any]], name: str) -> None:
        self.log, self.name = log, name

    def send(self, message: Any) -> None:
        self.log.append((self.name, message))

    post = send


@pytest.fixture
def log() -> list[tuple[str, Any]]:
    """What the publisher sent, in order: ("link", message) to the page,
    ("channel", message) to other tabs."""
    return []


@pytest.fixture
def publisher(log: list[tuple[str, Any]], request: pytest.FixtureRequest) -> Publisher:
    """A publisher writing to ``log``; ``parametrize("publisher", ["volatile"], indirect=True)``
    for a volatile engine's."""
    volatile = getattr(request, "param", None) == "volatile"
    return Publisher(link=Recorder(log, "link"),
                     channel=Recorder(log, "channel"),  # type: ignore[arg-type]
                     source="tab:volatile" if volatile else "tab", volatile=volatile)


def test_the_run_goes_first_then_the_page_hears_then_other_tabs_merged_in_order(
    publisher: Publisher, log: list[tuple[str, Any]],
) -> None:
    """The page handles its news before a ``run`` queued behind it, so news waits for the end
    of the step that stored it: the step's ``run`` goes out first (bench.mjs --trace)."""
    async def main() -> None:
        publisher.records([record("a")])
        publisher.records([record("b"), record("c")])
        log.append(("link", "run"))  # what the step does next: hand off the claimed job
        assert log == [("link", "run")]
        await asyncio.sleep(0)
        assert [name for name, _ in log] == ["link", "link", "link", "channel"]
        assert [updated_jobs(m)[0]["id"] for _, m in log[1:3]] == ["a", "b"]
        [(_, merged)] = [entry for entry in log if entry[0] == "channel"]
        assert [job["id"] for job in updated_jobs(merged)] == ["a", "b", "c"]
    run(main)


@pytest.mark.parametrize("publisher", ["volatile"], indirect=True)
def test_a_volatile_engines_page_hears_at_once(
    publisher: Publisher, log: list[tuple[str, Any]],
) -> None:
    async def main() -> None:
        publisher.records([record("a")])
        log.append(("link", "run"))
        assert [m if m == "run" else updated_jobs(m)[0]["id"] for _, m in log] == ["a", "run"]
        await asyncio.sleep(0)
        assert [name for name, _ in log] == ["link", "link"]  # and nothing on the channel
    run(main)


def test_progress_keeps_its_place_among_the_news_and_batches_stay_within_the_limit(
    publisher: Publisher, log: list[tuple[str, Any]],
) -> None:
    async def main() -> None:
        publisher.records([record(f"r{n}") for n in range(NEWS_BATCH + 1)])
        publisher.progress("r0", 0.5, "half")
        publisher.records([record("late")])
        await asyncio.sleep(0)
        posted = [updated_jobs(m) for name, m in log if name == "channel"]
        assert [len(jobs) for jobs in posted] == [NEWS_BATCH, 1, 1, 1]
        assert posted[2][0]["progress_only"] and posted[3][0]["id"] == "late"
    run(main)


@pytest.mark.parametrize("publisher", ["volatile"], indirect=True)
def test_volatile_news_never_reaches_the_channel(publisher: Publisher,
                                                 log: list[tuple[str, Any]]) -> None:
    async def main() -> None:
        publisher.records([record("v")])
        publisher.progress("v", 1, None)
        await asyncio.sleep(0)
        assert [name for name, _ in log] == ["link", "link"]
        assert all(j["volatile"] for _, m in log for j in m["jobs"])
    run(main)
