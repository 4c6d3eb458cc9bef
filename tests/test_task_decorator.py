"""``@pyjobq.task``: a job kind declared as a decorated ``async def``.

Most tests run a task on simulated tabs (``task.options(queue=tab.queue)``, the tab given
the task's reconstructor as a page that defines the task would have it); those about the
real ``pyjobq`` module — importing, configuring, the queue starting — run in a fresh
interpreter, since importing pyjobq.queue reads the settings for good.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import pytest

import pyjobq
from pyjobq import AbortSignal, ConfigurationError, InvalidJobError, Job, Status, Task
from pyjobq.testing import World, run, settle

ROOT = Path(__file__).resolve().parent.parent

calls: list[tuple[Any, ...]] = []


@pyjobq.task(type="notes", max_attempts=2, group="doc-1")
async def save_note(signal: AbortSignal, doc_id: str, text: str, *,
                    draft: bool = False) -> dict[str, Any]:
    calls.append(("save_note", doc_id, text, draft))
    return {"saved": doc_id, "chars": len(text), "draft": draft}


@pyjobq.task
async def spread(signal: AbortSignal, *parts: int, **named: str) -> list[Any]:
    return [list(parts), named]


@pyjobq.task(name="reports.publish", label="publish report")
async def publish(signal: AbortSignal, report: int) -> None:
    calls.append(("publish", report))
    raise pyjobq.Terminal(f"report {report} cannot be published")


@pyjobq.task(persistent=False, type="ui")
async def count_items(signal: AbortSignal, things: set[str]) -> int:
    return len(things)


def tasks(*declared: Task[Any, Any]) -> dict[str, Callable[[Any], Any]]:
    """The reconstructors a page that defines these tasks has."""
    return {t.name: t.factory for t in declared}


def python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


# ---------------------------------------------------------------- declaring


def test_a_task_is_named_module_qualname_or_name_and_keeps_its_function() -> None:
    assert save_note.name == f"{__name__}:save_note"
    assert publish.name == "reports.publish"
    assert save_note.persistent and not count_items.persistent
    assert save_note.__doc__ is save_note.fn.__doc__ and save_note.__wrapped__ is save_note.fn
    assert repr(publish) == "<pyjobq.Task 'reports.publish' persistent>"
    assert repr(count_items).endswith("volatile>")


def test_calling_the_task_runs_the_function_now_with_the_signal_given() -> None:
    async def main() -> None:
        signal = AbortSignal()
        assert await save_note(signal, "d", "hi") == {"saved": "d", "chars": 2, "draft": False}
    asyncio.run(main())


def test_a_task_must_be_an_async_def_whose_first_parameter_takes_the_signal() -> None:
    def not_async(signal: AbortSignal) -> None: ...

    async def no_parameter() -> None: ...

    async def keyword_signal(*, signal: AbortSignal) -> None: ...

    with pytest.raises(ConfigurationError, match="needs an async def"):
        pyjobq.task(not_async)  # type: ignore[type-var]
    for fn in (no_parameter, keyword_signal):
        with pytest.raises(ConfigurationError, match=r"first parameter receives the job's "
                                                     r"AbortSignal; write `async def \w+\(signal"):
            pyjobq.task(fn)  # type: ignore[arg-type]


def test_a_method_or_a_callable_without_a_name_is_refused_saying_what_to_do() -> None:
    import functools

    class Notes:
        async def save(self, text: str) -> None: ...

    async def save(signal: AbortSignal, text: str) -> None: ...

    with pytest.raises(ConfigurationError, match=r"Notes.save looks like a method .*'self'.*"
                                                 r"module-level async def"):
        pyjobq.task(Notes.save)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"no __qualname__ .*@pyjobq.task\(name=...\)"):
        pyjobq.task(functools.partial(save, text="x"))
    named = pyjobq.task(name="tests.partial")(functools.partial(save, text="x"))
    assert named.name == "tests.partial"


def test_declaring_options_of_the_wrong_kind_is_refused_naming_the_option() -> None:
    async def f(signal: AbortSignal) -> None: ...

    bad: list[tuple[dict[str, Any], str]] = [
        ({"type": ""}, r"task\(type=...\)"),
        ({"max_attempts": 0}, r"max_attempts=...\): expected an int >= 1"),
        ({"label": 3}, r"label=...\)"), ({"group": None, "name": ""}, r"name=...\)"),
        ({"persistent": "yes"}, "persistent"), ({"name": "fetch"}, "pyjobq uses that name"),
        ({"name": "volatile"}, "pyjobq uses that name"),
        ({"persistent": False, "group": "g"}, "groups are for persistent jobs"),
    ]
    for options, message in bad:
        with pytest.raises(ConfigurationError, match=message):
            pyjobq.task(**options)(f)


def test_a_name_is_one_functions_and_the_same_function_defined_again_replaces_it() -> None:
    async def main() -> None:
        def cell(answer: int) -> Task[[], int]:
            # A notebook cell run again: the same module:qualname, a new function object.
            @pyjobq.task(name="cell.answer")
            async def answer_task(signal: AbortSignal) -> int:
                return answer
            return answer_task

        first, second = cell(1), cell(2)
        world = World()
        tab = world.open_tab(reconstructors={"cell.answer": pyjobq.config.settings()
                                             .reconstructors["cell.answer"]})
        assert await first.options(queue=tab.queue).enqueue().result() == 2  # the newest runs
        assert await second.options(queue=tab.queue).enqueue().result() == 2

        async def other(signal: AbortSignal) -> int:
            return 0

        with pytest.raises(ConfigurationError, match=r"'cell.answer' is already .*answer_task's; "
                                                     r".*other cannot take it too"):
            pyjobq.task(name="cell.answer")(other)
    run(main)


def test_a_name_given_to_configure_as_a_reconstructor_is_not_taken_by_a_task() -> None:
    assert python("""
        import pyjobq
        pyjobq.configure(reconstructors={"upload": lambda params: None})
        async def upload(signal): ...
        try:
            pyjobq.task(name="upload")(upload)
        except pyjobq.ConfigurationError as exc:
            assert "already a reconstructor given to pyjobq.configure" in str(exc), exc
            print("refused")
    """) == "refused\n"


# ---------------------------------------------------------------- importing and the queue


def test_declaring_a_task_imports_no_queue_reads_no_names_and_configure_stays_open() -> None:
    out = python("""
        import asyncio, sys, pyjobq
        from pyjobq import config

        @pyjobq.task
        async def double(signal, n: int) -> int:
            return 2 * n

        assert "pyjobq.queue" not in sys.modules and config._read_by is None
        assert config.settings().reconstructors["__main__:double"] == double.factory
        pyjobq.configure(db_name="tasks-first")  # still open: nothing read the names
        from pyjobq import queue
        assert queue.settings.db_name == "tasks-first" and queue._side is None

        @pyjobq.task
        async def triple(signal, n: int) -> int:
            return 3 * n

        assert queue._side is None  # declared after the import: the queue did not start

        async def main():
            print(await double.enqueue(4).result(timeout=5), await triple.enqueue(4).result())

            @pyjobq.task
            async def late(signal) -> str:  # declared while the queue runs
                return "late"

            print(await late.enqueue().result(timeout=5))

        asyncio.run(main())
    """)
    assert out.split() == ["8", "12", "late"]


def test_a_task_enqueued_through_pyjobq_gives_a_job_that_reads_its_record() -> None:
    out = python("""
        import asyncio, pyjobq

        @pyjobq.task(type="mail", group="inbox", label="send mail", max_attempts=3)
        async def send(signal, to: str, *, cc: list[str] | None = None) -> str:
            return f"sent to {to} cc {cc}"

        async def main():
            job = send.options(delay_ms=50).enqueue("ada", cc=["bob"])
            assert isinstance(job, pyjobq.Job)
            await job.stored
            [record] = await pyjobq.jobs(group="inbox")
            assert record["id"] == job.id and record["status"] == "pending", record
            assert (record["type"], record["label"], record["max_attempts"]) == (
                "mail", "send mail", 3), record
            assert record["_reconstructor"] == "__main__:send", record
            assert record["_params"] == {"args": ["ada"], "kwargs": {"cc": ["bob"]}}, record
            print(await job.result(timeout=5))
            print(await job.status())

        asyncio.run(main())
    """)
    assert out.splitlines() == ["sent to ada cc ['bob']", "done"]


# ---------------------------------------------------------------- enqueueing


def test_a_persistent_task_runs_with_its_arguments_and_its_options() -> None:
    async def main() -> None:
        calls.clear()
        world = World()
        tab = world.open_tab(reconstructors=tasks(save_note))
        job = save_note.options(queue=tab.queue).enqueue("doc-1", "hello", draft=True)
        assert isinstance(job, Job)
        await job.stored
        stored = await world.record(job.id)
        assert stored is not None
        assert (stored["type"], stored["group"], stored["label"], stored["max_attempts"]) == (
            "notes", "doc-1", "save_note", 2)
        assert (stored["_reconstructor"], stored["_params"]) == (
            save_note.name, {"args": ["doc-1", "hello"], "kwargs": {"draft": True}})
        assert await job.result() == {"saved": "doc-1", "chars": 5, "draft": True}
        assert calls == [("save_note", "doc-1", "hello", True)]
    run(main)


def test_options_override_the_defaults_for_the_calls_made_through_them_only() -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab(reconstructors=tasks(save_note))
        urgent = save_note.options(queue=tab.queue, type="urgent", group="doc-2", label="now",
                                   max_attempts=4, delay_ms=1_000)
        job = urgent.enqueue("doc-2", "x")
        plain = save_note.options(queue=tab.queue).enqueue("doc-1", "y")
        await settle()
        stored = await world.record(job.id)
        assert stored is not None
        assert (stored["type"], stored["group"], stored["label"], stored["max_attempts"],
                stored["status"]) == ("urgent", "doc-2", "now", 4, "pending")
        assert (await plain.result())["saved"] == "doc-1"
        assert not job.done.done()  # waits out its delay
        await world.advance(1_000)
        assert (await job.result())["saved"] == "doc-2"
    run(main)


class FakeQueue:
    """A :class:`pyjobq.tasks.TaskQueue` that records what a task asks of it."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Any, dict[str, Any]]] = []

    def enqueue_persistent(self, reconstructor: str, params: Any = None,
                           **options: Any) -> Job:
        self.asked.append((reconstructor, params, options))
        return Job("persistent")

    def enqueue(self, executor: Callable[[AbortSignal], Any], **options: Any) -> Job:
        self.asked.append(("volatile", executor, options))
        return Job("volatile")


def test_a_task_hands_the_queue_its_key_and_timeout() -> None:
    async def main() -> None:
        queue = FakeQueue()
        save_note.options(queue=queue).enqueue("d", "t")
        save_note.options(queue=queue, key="doc-1", timeout=2.5).enqueue("d", "t")
        count_items.options(queue=queue, key="list").enqueue({"a"})
        (_, _, plain), (_, _, keyed), (_, _, volatile) = queue.asked
        assert (plain["key"], plain["timeout_s"]) == (None, None)
        assert (keyed["key"], keyed["timeout_s"]) == ("doc-1", 2.5)
        assert (volatile["key"], volatile["timeout_s"]) == ("list", None)
        assert keyed["delay_ms"] == 0 and keyed["group"] == "doc-1"
    asyncio.run(main())


def test_arguments_that_would_not_come_back_as_they_were_are_refused_naming_them() -> None:
    async def main() -> None:
        queue = FakeQueue()
        on = save_note.options(queue=queue)
        cases: list[tuple[Callable[[], Job], str]] = [
            (lambda: on.enqueue(("a", "b"), "t"),  # type: ignore[arg-type]
             r"argument 'doc_id' would not come back as it was.*\('a', 'b'\) would be read as "
             r"\['a', 'b'\].*list rather than tuple"),
            (lambda: on.enqueue("d", {1: "x"}),  # type: ignore[arg-type]
             r"argument 'text' would not come back.*\{'1': 'x'\}"),
            (lambda: on.enqueue("d", object()),  # type: ignore[arg-type]
             r"argument 'text' must be JSON-like"),
            (lambda: on.enqueue("d", math.nan),  # type: ignore[arg-type]
             r"argument 'text' must be JSON-like"),
            (lambda: on.enqueue("d", "t", draft={"deep": (1,)}),  # type: ignore[arg-type]
             r"argument 'draft' would not come back"),
            (lambda: spread.options(queue=queue).enqueue(1, (2,)),  # type: ignore[arg-type]
             r"argument '\*parts\[1\]' would not come back"),
            (lambda: spread.options(queue=queue).enqueue(x=b"y"),  # type: ignore[arg-type]
             r"argument 'x' must be JSON-like"),
        ]
        for call, message in cases:
            with pytest.raises(InvalidJobError, match=message):
                call()
        assert queue.asked == []  # nothing was filed
    asyncio.run(main())


def test_arguments_that_do_not_fit_the_function_are_refused_at_the_call() -> None:
    async def main() -> None:
        queue = FakeQueue()
        on = save_note.options(queue=queue)
        with pytest.raises(InvalidJobError, match=r"save_note.enqueue\(\): the arguments do not "
                                                  r"fit save_note\(signal.*missing a required "
                                                  r"argument: 'text'.*AbortSignal, given by the "
                                                  r"queue"):
            on.enqueue("d")  # type: ignore[call-arg]
        with pytest.raises(InvalidJobError, match="unexpected keyword argument 'colour'"):
            on.enqueue("d", "t", colour="red")  # type: ignore[call-arg]
        assert queue.asked == []
        spread.options(queue=queue).enqueue(1, 2, a="b")
        [(_, params, _)] = queue.asked
        assert params == {"args": [1, 2], "kwargs": {"a": "b"}}
    asyncio.run(main())


def test_options_of_the_wrong_kind_are_refused_naming_the_option() -> None:
    for options, message in [({"key": 3}, r"options\(key\)"), ({"key": ""}, r"options\(key\)"),
                             ({"delay_ms": -1}, r"options\(delay_ms\)"),
                             ({"delay_ms": True}, r"options\(delay_ms\)"),
                             ({"type": 1}, r"options\(type\)"),
                             ({"max_attempts": 0}, r"options\(max_attempts\)")]:
        with pytest.raises(InvalidJobError, match=message):
            save_note.options(**options)
    with pytest.raises(InvalidJobError, match="volatile jobs run at once"):
        count_items.options(delay_ms=5)
    with pytest.raises(InvalidJobError, match="groups are for persistent jobs"):
        count_items.options(group="g")


def test_a_volatile_task_runs_in_this_tab_with_any_python_arguments() -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab()  # no reconstructor: volatile tasks need none
        job = count_items.options(queue=tab.queue).enqueue({"a", "b", "c"})
        assert await job.result() == 3
        rows = [r for r in tab.published.values() if r["id"] == job.id]
        assert rows[0]["volatile"] is True and rows[0]["type"] == "ui"
        assert await world.record(job.id) is None  # nothing stored
    run(main)


# ---------------------------------------------------------------- a reload


def test_after_a_reload_a_page_that_defines_the_task_runs_it_one_that_lacks_it_fails_it() -> None:
    """The page that filed the job is gone before it ran (crashed: a hard reload); the
    reloaded page defines the task and runs it. A job picked up by a page whose code lacks the
    task fails as orphaned, naming it."""
    async def main() -> None:
        calls.clear()
        world = World()
        first = world.open_tab(reconstructors=tasks(save_note))
        job = save_note.options(queue=first.queue, delay_ms=5_000).enqueue("doc-9", "kept")
        await job.stored
        first.crash()
        reloaded = world.open_tab(reconstructors=tasks(save_note))
        handle = reloaded.queue.job(job.id)
        await world.advance(5_000)
        assert await handle.result() == {"saved": "doc-9", "chars": 4, "draft": False}
        assert calls == [("save_note", "doc-9", "kept", False)]

        reloaded.crash()
        lacking = world.open_tab()
        orphan = publish.options(queue=lacking.queue).enqueue(7)
        with pytest.raises(pyjobq.JobFailed) as failed:
            await orphan.result()
        outcome = failed.value.outcome
        assert (outcome.status, outcome.code, failed.value.code) == (
            Status.FAILED, "orphaned", "orphaned")
        assert outcome.error is not None and "'reports.publish'" in outcome.error
        assert "@pyjobq.task" in outcome.error
        assert ("publish", 7) not in calls
    run(main)


def test_a_task_that_raises_fails_its_job_with_the_error() -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab(reconstructors=tasks(publish))
        job = publish.options(queue=tab.queue).enqueue(3)
        with pytest.raises(pyjobq.JobFailed, match=r"ended failed: report 3 cannot be published"):
            await job.result()
        assert await job.status() is Status.FAILED
    run(main)


def test_stored_params_of_another_shape_fail_the_job_as_its_reconstructor_failing() -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab(reconstructors=tasks(save_note))
        job = tab.queue.enqueue_persistent(save_note.name, ["doc", "text"])
        outcome = await job
        assert (outcome.status, outcome.code) == ("failed", "reconstructor_failed")
        assert outcome.error is not None and "'args': [...]" in outcome.error
    run(main)
